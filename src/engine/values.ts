/**
 * Step values are stored as JSON. A step returns to workflow code exactly
 * what replay would return (the JSON round trip), so the first run and a
 * resumed run see the same values (a Date becomes a string in both).
 */

import { StepFailedError } from "../shared/errors.ts";

export function storedValue(value: unknown, what: string): unknown {
  if (value === undefined) return undefined;
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new StepFailedError(what, `${what} returned a value that cannot be stored as JSON (${(err as Error).message})`, {
      code: "not_serializable",
      hint: "return plain data: objects, arrays, strings, numbers, booleans, null",
    });
  }
  return text === undefined ? undefined : JSON.parse(text);
}

/**
 * A step's arguments digest, compared on replay: the 64-bit wyhash of their
 * JSON (`argsHash`), written "x" and 16 hex digits. Journals recorded
 * before this form hold the same hash in base 36 (1 to 13 digits, as
 * BigInt#toString(36) writes it); replay accepts both forms
 * (`digestMatches`, `sameArgs`), so those journals stay valid.
 *
 * Why 17 characters: JSON.parse (JavaScriptCore) interns string values of
 * up to 16 characters in its atom table, and each checkpoint a resume
 * decodes carries a digest no other one has. Interning them was 40% of
 * decoding a checkpoint payload (measured on 10,000: 3.3 ms, 1.9 ms with
 * 17 characters; on 40,000: 18 ms against 7.5 ms, the table growing with
 * the run).
 */
export function digestArgs(value: unknown): string {
  return formatDigest(argsHash(value));
}

/**
 * The hash a step's arguments digest is written from. A replayed tool step
 * compares it with the recorded digest (`digestMatches`) without writing it
 * out: BigInt#toString cost more than all the rest of a replayed step.
 */
export function argsHash(value: unknown): bigint {
  let text: string;
  try {
    text = JSON.stringify(value) ?? "undefined";
  } catch {
    text = String(value);
  }
  return Bun.hash(text) as bigint;
}

export function formatDigest(hash: bigint): string {
  return `x${hash.toString(16).padStart(16, "0")}`;
}

/**
 * True exactly when `digest` is `hash` written in either form: the
 * current one, or the base-36 one of older journals. Allocates nothing.
 */
export function digestMatches(digest: string, hash: bigint): boolean {
  if (!decodeDigest(digest)) return false;
  HASH_BYTES.setBigUint64(0, hash, true);
  return HASH_BYTES.getUint32(0, true) === decodedLow && HASH_BYTES.getUint32(4, true) === decodedHigh;
}

/**
 * Whether a step's recorded arguments and the ones asked for now are the
 * same: equal strings, or the same hash written in the two forms (a step
 * of an older journal asked for by this version). Arguments that are not
 * digests (a sleep's duration) compare as strings.
 */
export function sameArgs(recorded: string, asked: string): boolean {
  if (recorded === asked) return true;
  // Two digests of one form are equal exactly when their strings are; the forms differ in length.
  if (recorded.length === asked.length || !decodeDigest(recorded)) return false;
  const high = decodedHigh;
  const low = decodedLow;
  return decodeDigest(asked) && decodedHigh === high && decodedLow === low;
}

/**
 * Arguments asked for now (a digest string, or a hash not written yet),
 * written for a message that shows them next to the recorded ones: in the
 * recorded digest's form, so the two read alike: base 36 when the
 * recorded arguments are not a digest of the current form, the current
 * form when nothing was recorded.
 */
export function argsLike(asked: string | bigint, recorded: string | undefined): string {
  const legacy = recorded !== undefined && !isCurrentForm(recorded);
  if (typeof asked === "bigint") return legacy ? asked.toString(36) : formatDigest(asked);
  if (!legacy || !isCurrentForm(asked) || !decodeDigest(asked)) return asked;
  return ((BigInt(decodedHigh) << 32n) | BigInt(decodedLow)).toString(36);
}

function isCurrentForm(digest: string): boolean {
  return digest.length === 17 && digest.charCodeAt(0) === 120;
}

const HASH_BYTES = new DataView(new ArrayBuffer(8));
/** Value of each digit's char code (lower case only, as BigInt#toString writes them); -1 otherwise. */
const DIGIT = new Int8Array(128).fill(-1);
for (let i = 0; i < 36; i++) DIGIT["0123456789abcdefghijklmnopqrstuvwxyz".charCodeAt(i)] = i;
const B36_6 = 36 ** 6;
const TWO_16 = 2 ** 16;
const TWO_32 = 2 ** 32;

/** The hash's 32-bit words, as the last successful decodeDigest read them. */
let decodedHigh = 0;
let decodedLow = 0;

/** Reads a digest of either form into decodedHigh/decodedLow; false when the string is neither form. */
function decodeDigest(digest: string): boolean {
  return digest.length === 17 ? digest.charCodeAt(0) === 120 && decodeHex(digest) : decodeBase36(digest);
}

/** "x" and 16 hex digits. */
function decodeHex(digest: string): boolean {
  const high = hexWord(digest, 1);
  const low = hexWord(digest, 9);
  if (high < 0 || low < 0) return false;
  decodedHigh = high;
  decodedLow = low;
  return true;
}

function hexWord(digest: string, from: number): number {
  let word = 0;
  for (let i = from; i < from + 8; i++) {
    const c = digest.charCodeAt(i);
    const d = c < 128 ? DIGIT[c]! : -1;
    if (d < 0 || d > 15) return -1;
    word = word * 16 + d;
  }
  return word;
}

/**
 * A canonical base-36 number (1 to 13 digits, no leading zero) below 2^64.
 * Every step of the arithmetic stays below 2^53, so doubles hold it exactly.
 */
function decodeBase36(digest: string): boolean {
  const n = digest.length;
  if (n === 0 || n > 13 || (n > 1 && digest.charCodeAt(0) === 48)) return false;
  // digest = high * 36^6 + low: low from the last 6 digits (< 2^32), high from the rest (< 36^7 < 2^37).
  const cut = n > 6 ? n - 6 : 0;
  let high = 0;
  for (let i = 0; i < cut; i++) {
    const c = digest.charCodeAt(i);
    const d = c < 128 ? DIGIT[c]! : -1;
    if (d < 0) return false;
    high = high * 36 + d;
  }
  let low = 0;
  for (let i = cut; i < n; i++) {
    const c = digest.charCodeAt(i);
    const d = c < 128 ? DIGIT[c]! : -1;
    if (d < 0) return false;
    low = low * 36 + d;
  }
  // high * 36^6 + low in 32-bit words: split high at 2^16 so each product stays below 2^53.
  const highTop = Math.floor(high / TWO_16);
  const part0 = (high - highTop * TWO_16) * B36_6 + low; // < 2^48
  const part1 = highTop * B36_6; // < 2^53, weighs 2^16
  const part1Top = Math.floor(part1 / TWO_16); // weighs 2^32
  const sum = (part1 - part1Top * TWO_16) * TWO_16 + part0; // < 2^49
  const carry = Math.floor(sum / TWO_32);
  const top = part1Top + carry;
  if (top >= TWO_32) return false; // 2^64 or more: no hash
  decodedHigh = top;
  decodedLow = sum - carry * TWO_32;
  return true;
}

export function slug(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]+/g, "_").slice(0, 60) || "step";
}
