/**
 * Branded identifiers. A `RunId` is made only by `newRunId()` or
 * `parseRunId()`, so a stage key can never be passed where a run id belongs.
 *
 * Run ids sort by creation time: 10 Crockford base32 characters of the
 * millisecond clock, then 8 random ones (lower case, easy to type; the CLI
 * accepts any unique prefix).
 *
 * A caller may name a root run itself (`atomic run --id KEY`, `POST
 * /api/runs {id}`, a schedule's tick): a run key. Keys are case-folded to
 * lower case (the CLI and the API look runs up lower-cased), 1-100 of
 * a-z 0-9 . _ - beginning with a letter or digit (safe in file names and
 * in `<run id>:<stage>` addresses), and must hold at least one character
 * a generated id never has (. _ - i l o u): so a key can never equal, nor
 * be a prefix of, a generated id, and typing a generated id's prefix never
 * resolves to a keyed run by accident (a lookup tries the exact id first).
 */

declare const brand: unique symbol;
export type Brand<T, B extends string> = T & { readonly [brand]: B };

export type RunId = Brand<string, "RunId">;
export type HolderId = Brand<string, "HolderId">;

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

function encodeTime(ms: number, length: number): string {
  let out = "";
  for (let i = 0; i < length; i++) {
    out = ALPHABET[ms % 32] + out;
    ms = Math.floor(ms / 32);
  }
  return out;
}

function randomChars(length: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(length));
  let out = "";
  for (const b of bytes) out += ALPHABET[b % 32];
  return out;
}

export function newRunId(now = Date.now()): RunId {
  return (encodeTime(now, 10) + randomChars(8)) as RunId;
}

const RUN_ID = /^[0-9a-hjkmnp-tv-z]{18}$/;

export function isRunId(text: string): text is RunId {
  return RUN_ID.test(text);
}

/** Accepts a full run id; prefixes are resolved against the journal by the CLI. */
export function parseRunId(text: string): RunId | undefined {
  const t = text.trim().toLowerCase();
  return isRunId(t) ? t : undefined;
}

const RUN_KEY = /^[a-z0-9][a-z0-9._-]{0,99}$/;
/** The characters of a key that no generated id has (the alphabet leaves out i, l, o, u). */
const NOT_IN_IDS = /[._\-ilou]/;

/** A caller-chosen run id, case-folded; or why it is not one (a sentence). */
export function parseRunKey(text: string): { id: RunId } | { problem: string } {
  const t = text.trim().toLowerCase();
  if (!RUN_KEY.test(t)) {
    return { problem: `run id ${JSON.stringify(text)} must be 1-100 characters of letters, digits, ".", "_" and "-", beginning with a letter or digit` };
  }
  if (!NOT_IN_IDS.test(t)) {
    return { problem: `run id ${JSON.stringify(text)} could be taken for (the start of) a generated run id: it needs a ".", "_" or "-" (or one of the letters i, l, o, u)` };
  }
  return { id: t as RunId };
}

/** A generated id or a caller's key (what a `<run>:<stage>` address or a lookup may name exactly). */
export function parseRunRef(text: string): RunId | undefined {
  const id = parseRunId(text);
  if (id) return id;
  const key = parseRunKey(text);
  return "id" in key ? key.id : undefined;
}

export function newHolderId(role: string): HolderId {
  // Unique across hosts (pids are not): 60 random bits.
  return `${role}-${process.pid}-${randomChars(12)}` as HolderId;
}

/**
 * A pool worker's id: unique across pools and hosts (a pid is neither), with
 * the worker's index in its pool in front, for people reading logs.
 */
export function newWorkerId(index: number): string {
  return `w${index}-${encodeTime(Date.now(), 10)}${randomChars(10)}`;
}

export function newId(prefix: string): string {
  return `${prefix}_${encodeTime(Date.now(), 10)}${randomChars(8)}`;
}
