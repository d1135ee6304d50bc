/**
 * Workflow inputs: converted from `--input key=value` text to each key's
 * schema type, merged with `--inputs-json`, and validated with valibot
 * before anything runs. Errors name the key.
 *
 * Conversion reads the schema's kind (unwrapping optional/nullable/...):
 * - number: a decimal number as JSON writes it (`-3`, `1.5`, `1e3`).
 *   Hexadecimal, octal and binary (`0x10`, `0o7`, `0b1`), leading zeros,
 *   `Infinity` and surrounding spaces are refused: `Number()` would take
 *   `0x10` as 16, which no one typing an amount means.
 * - date (`v.date()`): an ISO 8601 date (`2026-12-01`, midnight UTC) or
 *   date-time (`2026-12-01T10:00:00Z`, `…+02:00`; without a zone, local
 *   time), checked against the calendar (no 2026-02-30). The workflow gets
 *   a Date; so does a resumed run (`reviveInputs`: inputs are stored as
 *   JSON, where a Date is its ISO string) and `--inputs-json` (ISO text).
 * - boolean: true/false/yes/no/1/0/on/off; picklist and enum: one of their
 *   options; string: the text as it is; objects, records and tuples: JSON.
 * - array: each `--input key=value` adds one element, converted to the
 *   element's type; a value that is a JSON array adds its elements.
 * Any other key given twice is refused: the second would silently win.
 */

import * as v from "valibot";
import { UsageError } from "../shared/errors.ts";
import type { InputSchemas } from "../sdk/types.ts";

type AnySchema = v.GenericSchema & {
  type: string;
  wrapped?: AnySchema;
  options?: readonly unknown[] | Record<string, unknown>;
  literal?: unknown;
};

const HINT = (file: string) => `list the workflow's inputs with: atomic workflows --inputs ${file}`;

export function parseInputPairs(
  schemas: InputSchemas,
  pairs: readonly string[],
  json: Record<string, unknown> | undefined,
  file: string,
): Record<string, unknown> {
  const raw: Record<string, unknown> = { ...json };
  const given = new Set<string>();
  for (const pair of pairs) {
    const eq = pair.indexOf("=");
    if (eq <= 0) {
      throw new UsageError("bad_input", `--input ${JSON.stringify(pair)} is not of the form key=value`, { hint: HINT(file) });
    }
    const key = pair.slice(0, eq);
    const text = pair.slice(eq + 1);
    const schema = schemas[key] as AnySchema | undefined;
    if (!schema) throw unknownKey(key, schemas, file);
    const inner = unwrap(schema);
    if (inner.type === "array") {
      const items = given.has(key) ? (raw[key] as unknown[]) : [];
      raw[key] = [...items, ...convertElements(key, text, inner, file)];
    } else if (given.has(key)) {
      throw new UsageError("bad_input", `input "${key}" is given twice`, {
        hint: `pass --input ${key}=... once (only an array input takes several values)`,
      });
    } else {
      raw[key] = convert(key, text, schema, file);
    }
    given.add(key);
  }
  return validateInputs(schemas, raw, file);
}

export function validateInputs(schemas: InputSchemas, values: Record<string, unknown>, file: string): Record<string, unknown> {
  if (values === null || typeof values !== "object" || Array.isArray(values)) {
    throw new UsageError("bad_input", "inputs must be a JSON object of key/value pairs", { hint: HINT(file) });
  }
  for (const key of Object.keys(values)) {
    if (!(key in schemas)) throw unknownKey(key, schemas, file);
  }
  const parsed = v.safeParse(v.object(schemas), reviveInputs(schemas, values));
  if (parsed.success) return parsed.output as Record<string, unknown>;
  const issue = parsed.issues[0];
  const key = issue.path?.map((p) => String(p.key)).join(".") ?? "?";
  const missing = issue.input === undefined;
  // A value out of a declared range is refused with the whole range, not valibot's one bound.
  const range = RANGE_ISSUES.includes(issue.type) && issue.path?.length === 1 ? rangeOf(schemas[key] as AnySchema) : undefined;
  throw new UsageError(
    missing ? "missing_input" : "bad_input",
    missing
      ? `input "${key}" is required`
      : range
        ? `input "${key}" must be ${range}, got ${JSON.stringify(issue.input)}`
        : `input "${key}" is invalid: ${issue.message}`,
    { hint: missing ? `pass it with --input ${key}=VALUE` : HINT(file) },
  );
}

const RANGE_ISSUES = ["min_value", "max_value", "min_length", "max_length"];

/**
 * The range a schema's pipe declares (`v.minValue`/`v.maxValue`, or
 * `v.minLength`/`v.maxLength` for arrays and text), in words: "from 1 to 12",
 * "1 to 8 items", "at least 0.5"; undefined when it declares none.
 */
export function rangeOf(schema: AnySchema | undefined): string | undefined {
  if (!schema) return undefined;
  const pipe = ((unwrap(schema) as AnySchema & { pipe?: { type: string; requirement?: unknown }[] }).pipe ?? []).slice(1);
  const bound = (type: string) => pipe.find((a) => a.type === type)?.requirement as number | undefined;
  const [min, max] = [bound("min_value"), bound("max_value")];
  const [minLen, maxLen] = [bound("min_length"), bound("max_length")];
  const unit = unwrap(schema).type === "array" ? " items" : " characters";
  if (minLen === 1 && maxLen === undefined && unit === " characters") return "not empty";
  if (min !== undefined && max !== undefined) return `from ${min} to ${max}`;
  if (min !== undefined) return `at least ${min}`;
  if (max !== undefined) return `at most ${max}`;
  if (minLen !== undefined && maxLen !== undefined) return `${minLen} to ${maxLen}${unit}`;
  if (minLen !== undefined) return `at least ${minLen}${unit}`;
  if (maxLen !== undefined) return `at most ${maxLen}${unit}`;
  return undefined;
}

function unknownKey(key: string, schemas: InputSchemas, file: string): UsageError {
  const known = Object.keys(schemas);
  return new UsageError("unknown_input", `the workflow has no input named "${key}"`, {
    hint: known.length ? `its inputs are: ${known.join(", ")}` : HINT(file),
  });
}

function unwrap(schema: AnySchema): AnySchema {
  let s = schema;
  while (s.wrapped && ["optional", "nullable", "nullish", "exact_optional", "undefinedable", "non_optional", "non_nullable", "non_nullish"].includes(s.type)) {
    s = s.wrapped;
  }
  return s;
}

/**
 * Inputs as the workflow sees them: ISO text turned into a Date where the
 * schema is `v.date()` (stored inputs are JSON; --inputs-json is too).
 * Anything else is left for validation to judge.
 */
export function reviveInputs(schemas: InputSchemas, values: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...values };
  for (const [key, value] of Object.entries(values)) {
    const schema = schemas[key] as AnySchema | undefined;
    if (schema && typeof value === "string" && unwrap(schema).type === "date") {
      const date = parseIsoDate(value);
      if (date) out[key] = date;
    }
  }
  return out;
}

const DECIMAL = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;
const ISO_DATE = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})?)?$/;

/** An ISO 8601 date or date-time that names a real day and time; undefined otherwise. */
function parseIsoDate(text: string): Date | undefined {
  const m = ISO_DATE.exec(text);
  if (!m) return undefined;
  const [y, mo, d, h = "0", mi = "0", sec = "0"] = m.slice(1);
  const day = new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d)));
  if (day.getUTCFullYear() !== Number(y) || day.getUTCMonth() !== Number(mo) - 1 || day.getUTCDate() !== Number(d)) return undefined;
  if (Number(h) > 23 || Number(mi) > 59 || Number(sec) > 59) return undefined;
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/** The elements one `--input key=value` adds to an array input. */
function convertElements(key: string, text: string, schema: AnySchema, file: string): unknown[] {
  if (text.trimStart().startsWith("[")) {
    try {
      const parsed = JSON.parse(text) as unknown;
      if (Array.isArray(parsed)) return parsed;
    } catch {
      // not JSON: one element, converted below
    }
  }
  const item = (schema as AnySchema & { item?: AnySchema }).item;
  return [item ? convert(key, text, item, file) : text];
}

function convert(key: string, text: string, schema: AnySchema, file: string): unknown {
  const s = unwrap(schema);
  const fail = (what: string) =>
    new UsageError("bad_input", `input "${key}" must be ${what}, got ${JSON.stringify(text)}`, { hint: HINT(file) });
  switch (s.type) {
    case "string":
      return text;
    case "number":
    case "bigint": {
      const n = Number(text);
      if (text.trim() === "" || !Number.isFinite(n)) throw fail("a number");
      // Text JavaScript would read as a number but a person does not mean so (0x10 is 16).
      if (!DECIMAL.test(text)) throw fail("a decimal number (like 16, -1.5 or 1e3)");
      return n;
    }
    case "date": {
      const date = parseIsoDate(text);
      if (!date) throw fail("an ISO 8601 date (like 2026-12-01 or 2026-12-01T10:00:00Z)");
      return date;
    }
    case "boolean": {
      const t = text.toLowerCase();
      if (["true", "yes", "1", "on"].includes(t)) return true;
      if (["false", "no", "0", "off"].includes(t)) return false;
      throw fail("true or false");
    }
    case "picklist":
    case "enum": {
      const options = Array.isArray(s.options) ? s.options : Object.values(s.options ?? {});
      const hit = options.find((o) => String(o) === text);
      if (hit === undefined) throw fail(`one of ${options.map((o) => JSON.stringify(o)).join(", ")}`);
      return hit;
    }
    case "literal":
      if (String(s.literal) !== text) throw fail(JSON.stringify(s.literal));
      return s.literal;
    case "object":
    case "array":
    case "record":
    case "tuple":
    case "strict_object":
    case "loose_object":
      try {
        return JSON.parse(text);
      } catch {
        throw fail("JSON");
      }
    default:
      return text;
  }
}

/** One line per input, for `atomic workflows --inputs FILE`. */
export function describeInputs(
  schemas: InputSchemas,
): { name: string; type: string; required: boolean; default?: unknown; range?: string; description?: string }[] {
  return Object.entries(schemas).map(([name, schema]) => {
    const s = schema as AnySchema & { default?: unknown };
    const inner = unwrap(s);
    const required = !["optional", "nullish", "exact_optional", "undefinedable"].includes(s.type);
    let type = inner.type;
    if ((inner.type === "picklist" || inner.type === "enum") && inner.options) {
      const opts = Array.isArray(inner.options) ? inner.options : Object.values(inner.options);
      type = opts.map((o) => JSON.stringify(o)).join(" | ");
    }
    const def = s.default !== undefined && typeof s.default !== "function" ? { default: s.default } : {};
    const range = rangeOf(s);
    const pipe = (inner as AnySchema & { pipe?: { type: string; description?: string }[] }).pipe ?? [];
    const description = pipe.find((a) => a.type === "description")?.description;
    return { name, type, required, ...def, ...(range ? { range } : {}), ...(description ? { description } : {}) };
  });
}
