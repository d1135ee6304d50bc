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

/** A short, stable digest of a step's arguments, compared on replay: `argsHash` in base 36. */
export function digestArgs(value: unknown): string {
  return formatDigest(argsHash(value));
}

/**
 * The 64-bit hash whose base-36 text is a step's arguments digest. Replay
 * compares it with the recorded digest through `digestMatches` instead of
 * formatting it: BigInt#toString(36) cost more than all the rest of a
 * replayed tool step (measured: ~2 ms of a 10,000-step replay, against
 * ~0.3 ms for the comparison).
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
  return hash.toString(36);
}

const HASH_BYTES = new DataView(new ArrayBuffer(8));
/** Value of each base-36 digit's char code (lower case only, as BigInt#toString(36) writes them); -1 otherwise. */
const DIGIT = new Int8Array(128).fill(-1);
for (let i = 0; i < 36; i++) DIGIT["0123456789abcdefghijklmnopqrstuvwxyz".charCodeAt(i)] = i;
const B36_6 = 36 ** 6;
const TWO_16 = 2 ** 16;
const TWO_32 = 2 ** 32;

/**
 * True exactly when `digest === formatDigest(hash)`, without allocating:
 * the digest is read as a canonical base-36 number (1 to 13 digits, no
 * leading zero) and compared with the hash's two 32-bit words. Every step
 * of the arithmetic stays below 2^53, so doubles hold it exactly.
 */
export function digestMatches(digest: string, hash: bigint): boolean {
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
  HASH_BYTES.setBigUint64(0, hash, true);
  return HASH_BYTES.getUint32(0, true) === sum - carry * TWO_32 && HASH_BYTES.getUint32(4, true) === part1Top + carry;
}

export function slug(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]+/g, "_").slice(0, 60) || "step";
}
