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

/** A short, stable digest of a step's arguments, compared on replay. */
export function digestArgs(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? "undefined";
  } catch {
    text = String(value);
  }
  return Bun.hash(text).toString(36);
}

export function slug(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]+/g, "_").slice(0, 60) || "step";
}
