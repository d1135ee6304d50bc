/**
 * The credentials atomic itself uses, in one place: which environment
 * variables hold them (kept from stages: runners/stage-env.ts) and which
 * values are secret (redacted from transcripts, logs, runner events and
 * results, journal records and CLI error messages: `redact`).
 *
 * A secret value is known to a process when
 * - it is the value of one of CREDENTIAL_VARIABLES in its own environment
 *   (read once, at the first redaction: the variables are set before a
 *   process starts and atomic never sets them); of a URL (ATOMIC_JOURNAL)
 *   only the password is, so the journal's address reads the same in every
 *   message;
 * - it was registered with `addSecret` (the password of a journal URL,
 *   by openJournal; the status token, when it is loaded);
 * - it is the status token of a home the process was told about
 *   (`addSecretsOfHome`, by openJournal), or of $ATOMIC_HOME.
 *
 * Besides known values, text that looks like a credential is redacted by
 * pattern (PATTERNS): API keys of the `sk-…` form (OpenAI, Anthropic,
 * OpenRouter), GitHub tokens, AWS access key ids, the token after
 * `Bearer `, the value after `api_key=` / `apikey:` / `access_token=` /
 * `client_secret=` / `password=`, and private-key blocks (PEM and
 * OpenSSH): a stage that prints a key it should not have found, or a
 * provider error that echoes one, does not carry it into the journal, the
 * logs or the workflow. Each pattern wants a long enough value, so short
 * examples ("sk-test") stay readable.
 *
 * Values shorter than MIN_SECRET_LENGTH are not redacted: replacing "pw"
 * in every line would mangle more than it hides. Redaction replaces the
 * exact value (and its percent-encoded form, as it appears in a URL); a
 * value split across two writes of a stream, or transformed (base64),
 * is not recognised.
 */

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CREDENTIAL_VARIABLES, readEnv } from "./config/environment.ts";

/**
 * Environment variables that hold credentials of atomic or of the agents
 * it drives: provider API keys, the journal URL (it may carry a
 * password) and Postgres' password (the registry's `credential` audience,
 * and ATOMIC_JOURNAL). A stage receives none of them unless its `env`
 * names it; a CLI agent adapter passes the ones its CLI needs (its
 * adapter in cli-agents/, `credentials`).
 */
export { CREDENTIAL_VARIABLES };

export const REDACTED = "[redacted]";
export const MIN_SECRET_LENGTH = 8;
const TOKEN_FILE = "status-token";

const registered = new Set<string>();
const homes = new Set<string>();
let fromEnv: string[] | undefined;
/** Every needle, longest first (so a value containing another is replaced whole); rebuilt when one is added. */
let needles: string[] | undefined;

/** Registers a secret value of this process (ignored when too short to redact). */
export function addSecret(value: string | undefined): void {
  if (!value || value.length < MIN_SECRET_LENGTH || registered.has(value)) return;
  registered.add(value);
  needles = undefined;
}

/** The password of a URL (`postgres://user:pw@host/db`), registered as a secret (as written and decoded). */
export function addSecretsOfUrl(url: string | undefined): void {
  const password = urlPassword(url);
  if (!password) return;
  addSecret(password);
  addSecret(safeDecode(password));
}

/** The status token kept in `home`, when there is one, becomes a secret of this process. */
export function addSecretsOfHome(home: string | undefined): void {
  if (!home || homes.has(home)) return;
  homes.add(home);
  try {
    addSecret(readFileSync(join(home, TOKEN_FILE), "utf8").trim());
  } catch {
    // no token in this home (yet): nothing to hide
  }
}

/** Credentials by their look (see the header): each regex and what its match becomes. */
const PATTERNS: readonly [RegExp, string][] = [
  [/-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----[\s\S]*?(?:-----END \1PRIVATE KEY-----|$)/g, REDACTED],
  [/\bsk-[A-Za-z0-9][A-Za-z0-9_-]{19,}/g, REDACTED],
  [/\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})/g, REDACTED],
  [/\bAKIA[0-9A-Z]{16}\b/g, REDACTED],
  [/\b(Bearer\s+)[A-Za-z0-9._~+/-]{16,}=*/gi, `$1${REDACTED}`],
  [/\b((?:api[_-]?key|access[_-]?token|client[_-]?secret|password)["']?\s*[:=]\s*["']?)[^\s"'&,;]{8,}/gi, `$1${REDACTED}`],
];
/** A cheap first look: text without any of these holds no pattern's match. */
const MAYBE = /sk-|gh[pousr]_|github_pat_|AKIA|bearer|api[_-]?key|access[_-]?token|client[_-]?secret|password|PRIVATE KEY/i;

function redactPatterns(text: string): string {
  if (!MAYBE.test(text)) return text;
  let out = text;
  for (const [re, by] of PATTERNS) out = out.replace(re, by);
  return out;
}

/** `text` with every known secret value, and whatever looks like a credential (PATTERNS), replaced by [redacted]. */
export function redact(text: string): string {
  if (text.length < MIN_SECRET_LENGTH) return text;
  let out = text;
  for (const n of currentNeedles()) if (out.includes(n)) out = out.replaceAll(n, REDACTED);
  return redactPatterns(out);
}

/**
 * `redact` for a text read line by line (a stage's log followed): a
 * private-key block spans lines, and a line alone holds only part of it.
 * After a line with its BEGIN (redacted from there), the lines up to its
 * END are left out (undefined), and the END line keeps what follows END;
 * so the body of a key never shows, as `redact` of the whole text hides it.
 */
export function lineRedactor(): (line: string) => string | undefined {
  let end: string | undefined;
  return (line) => {
    if (end !== undefined) {
      const at = line.indexOf(end);
      if (at < 0) return undefined;
      const rest = line.slice(at + end.length);
      end = undefined;
      return rest.trim() === "" ? undefined : redact(rest);
    }
    const begin = /-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----/.exec(line);
    if (begin && !line.includes(`-----END ${begin[1]}PRIVATE KEY-----`, begin.index)) end = `-----END ${begin[1]}PRIVATE KEY-----`;
    return redact(line);
  };
}

/** True when redaction can change anything: always, since credentials are also recognised by their look. */
export function secretsKnown(): boolean {
  return true;
}

/** True when `text` holds a known secret or something that looks like one (callers that copy structures only when they must). */
export function holdsSecret(text: string): boolean {
  if (text.length < MIN_SECRET_LENGTH) return false; // no needle nor pattern is that short (an event's type, most keys)
  for (const n of currentNeedles()) if (text.includes(n)) return true;
  return MAYBE.test(text) && redactPatterns(text) !== text;
}

/**
 * A JSON-like value with every string in it redacted (keys included). The
 * value itself comes back when nothing in it is secret, so the common case
 * copies nothing.
 */
export function redactValue<T>(value: T): T {
  return walk(value) as T;
}

function walk(value: unknown): unknown {
  if (typeof value === "string") return holdsSecret(value) ? redact(value) : value;
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    value.forEach((item, i) => {
      const r = walk(item);
      if (r !== item) (copy ??= value.slice())[i] = r;
    });
    return copy ?? value;
  }
  if (value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype) {
    let copy: Record<string, unknown> | undefined;
    for (const [k, item] of Object.entries(value)) {
      const r = walk(item);
      const key = holdsSecret(k) ? redact(k) : k;
      if (r !== item || key !== k) {
        copy ??= { ...(value as Record<string, unknown>) };
        if (key !== k) delete copy[k];
        copy[key] = r;
      }
    }
    return copy ?? value;
  }
  return value;
}

function currentNeedles(): string[] {
  if (needles) return needles;
  if (!fromEnv) {
    fromEnv = [];
    for (const name of CREDENTIAL_VARIABLES) {
      const v = readEnv(name);
      if (!v) continue;
      // A URL (the journal's): only its password is secret. Its host, port, user and database are shown in
      // messages (as the journal's location), so redacting the whole value would hide one mention of the
      // address and not the next; every mention of the password goes, with or without the rest of the URL.
      if (isUrl(v)) {
        const password = urlPassword(v);
        if (password) fromEnv.push(password, safeDecode(password));
      } else fromEnv.push(v);
    }
    addSecretsOfHome(readEnv("ATOMIC_HOME"));
  }
  const all = new Set<string>();
  for (const v of [...fromEnv, ...registered]) {
    if (v.length < MIN_SECRET_LENGTH) continue;
    all.add(v);
    const encoded = encodeURIComponent(v);
    if (encoded !== v) all.add(encoded);
  }
  needles = [...all].sort((a, b) => b.length - a.length);
  return needles;
}

function isUrl(text: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(text);
}

function urlPassword(url: string | undefined): string | undefined {
  const m = /^[a-z][a-z0-9+.-]*:\/\/[^/:@]*:([^@/]*)@/i.exec(url ?? "");
  return m?.[1] || undefined;
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
