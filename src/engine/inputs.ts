/**
 * Workflow inputs: converted from `--input key=value` text to each key's
 * schema type, merged with `--inputs-json`, and validated with valibot
 * before anything runs. Errors name the key.
 *
 * Conversion reads the schema's kind (unwrapping optional/nullable/...):
 * number and integer-like schemas take a finite number, boolean takes
 * true/false/yes/no/1/0, picklist and enum take one of their options,
 * string takes the text as it is; objects and arrays take JSON text.
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
  for (const pair of pairs) {
    const eq = pair.indexOf("=");
    if (eq <= 0) {
      throw new UsageError("bad_input", `--input ${JSON.stringify(pair)} is not of the form key=value`, { hint: HINT(file) });
    }
    const key = pair.slice(0, eq);
    const text = pair.slice(eq + 1);
    const schema = schemas[key] as AnySchema | undefined;
    if (!schema) throw unknownKey(key, schemas, file);
    raw[key] = convert(key, text, schema, file);
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
  const parsed = v.safeParse(v.object(schemas), values);
  if (parsed.success) return parsed.output as Record<string, unknown>;
  const issue = parsed.issues[0];
  const key = issue.path?.map((p) => String(p.key)).join(".") ?? "?";
  const missing = issue.input === undefined;
  throw new UsageError(
    missing ? "missing_input" : "bad_input",
    missing
      ? `input "${key}" is required`
      : `input "${key}" is invalid: ${issue.message}`,
    { hint: missing ? `pass it with --input ${key}=VALUE` : HINT(file) },
  );
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
      return n;
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
export function describeInputs(schemas: InputSchemas): { name: string; type: string; required: boolean; default?: unknown }[] {
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
    return { name, type, required, ...def };
  });
}
