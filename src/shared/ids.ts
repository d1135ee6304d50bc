/**
 * Branded identifiers. A `RunId` is made only by `newRunId()` or
 * `parseRunId()`, so a stage key can never be passed where a run id belongs.
 *
 * Run ids sort by creation time: 10 Crockford base32 characters of the
 * millisecond clock, then 8 random ones (lower case, easy to type; the CLI
 * accepts any unique prefix).
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
