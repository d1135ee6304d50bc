/**
 * The libraries behind structured output, in a bundle of their own
 * (src/shared/entry-points.ts): ajv with ajv-formats validates, and
 * @valibot/to-json-schema converts valibot schemas. Only processes running
 * a stage with a schema load it (json-schema.ts does, through importEntry):
 * the bundle is about 165 KB that a worker would otherwise parse at every
 * start.
 *
 * The dialect is JSON Schema draft-07 (ajv's default, and what the valibot
 * converter emits), or 2020-12 when a schema's `$schema` names it. A
 * schema is invalid when the meta-schema says so, when a pattern is not a
 * regular expression or a `$ref` resolves nowhere, and also (stricter than
 * the specification, which ignores them) when it has an unknown keyword (a
 * typo such as `requird` would otherwise accept everything) or an unknown
 * `format`. Ajv's other strict-mode complaints are about schemas that are
 * valid (`additionalItems` next to a single `items` schema, a property that
 * also matches a pattern, union types): they are let through.
 *
 * Each distinct schema gets an Ajv instance of its own: an instance keeps
 * every schema it compiled (and refuses a second one with the same `$id`),
 * which a long-running process compiling the schemas of many runs cannot
 * afford. Compiled validators are cached by the schema's JSON text, a
 * bounded number of them.
 */

import { toJsonSchema as valibotToJsonSchema } from "@valibot/to-json-schema";
import Ajv, { type ErrorObject, type Options, type ValidateFunction } from "ajv";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import type { GenericSchema } from "valibot";

export type JsonSchema = Record<string, unknown>;

/** Why a schema cannot be used; `message` is a clause to put after "the structured output schema …". */
export class SchemaProblem extends Error {}

const DRAFT_07 = "http://json-schema.org/draft-07/schema";
const DRAFT_2020 = "https://json-schema.org/draft/2020-12/schema";
const OPTIONS: Options = {
  allErrors: true,
  verbose: true,
  strictSchema: "log", // reported to the logger below, which keeps the two complaints that make a schema invalid
  strictTypes: false,
  strictTuples: false,
  allowUnionTypes: true,
  allowMatchingProperties: true,
};
const REFUSED_STRICT = /^(strict mode: )?(unknown keyword: .*|unknown format .*)$/;
const CACHE_SIZE = 64;
const MAX_ISSUES = 20;

const cache = new Map<string, (value: unknown) => string[]>();

/** The JSON Schema of a valibot schema (draft-07, without `$schema`); SchemaProblem for what has no JSON form. */
export function fromValibot(schema: unknown): JsonSchema {
  let converted: JsonSchema;
  try {
    converted = valibotToJsonSchema(schema as GenericSchema, {
      // Validations with no JSON form (v.check, ...) are not described; the root checks them with valibot.
      overrideAction: ({ valibotAction, jsonSchema, errors }) => (errors && valibotAction.kind === "validation" ? jsonSchema : undefined),
    }) as JsonSchema;
  } catch (err) {
    const why = (err as Error).message.replace(/ to JSON Schema\.?$/, "").replace(/^The /, "the ");
    throw new SchemaProblem(`cannot be described as JSON Schema: ${why}`);
  }
  delete converted.$schema; // the default dialect; providers do not need it, and a nested copy would be an error
  return converted;
}

/** A validator for `schema`: the problems of a value ("$.items[2]: must be number"), none when it conforms. SchemaProblem when the schema is invalid. */
export function compile(schema: JsonSchema): (value: unknown) => string[] {
  const key = JSON.stringify(schema);
  const hit = cache.get(key);
  if (hit) return hit;
  const strict: string[] = [];
  const validate = problems(newAjv(schema, strict), schema, strict);
  if (cache.size >= CACHE_SIZE) cache.delete(cache.keys().next().value!);
  cache.set(key, validate);
  return validate;
}

/** An Ajv for the schema's dialect; `strict` collects the strict-mode complaints that refuse a schema. */
function newAjv(schema: JsonSchema, strict: string[]): Ajv {
  const dialect = typeof schema.$schema === "string" ? schema.$schema.replace(/#$/, "") : DRAFT_07;
  const ignore = () => {};
  const logger = { log: ignore, error: ignore, warn: (msg: unknown) => REFUSED_STRICT.test(String(msg)) && strict.push(String(msg).replace(/^strict mode: /, "")) };
  let ajv: Ajv;
  if (dialect === DRAFT_07) ajv = new Ajv({ ...OPTIONS, logger });
  else if (dialect === DRAFT_2020) ajv = new Ajv2020({ ...OPTIONS, logger });
  else throw new SchemaProblem(`names $schema ${JSON.stringify(schema.$schema)}, a dialect atomic does not validate (draft-07, the default, or 2020-12)`);
  addFormats(ajv);
  return ajv;
}

function problems(ajv: Ajv, schema: JsonSchema, strict: string[]): (value: unknown) => string[] {
  if (!ajv.validateSchema(schema)) {
    const first = ajv.errors?.[0];
    const where = first?.instancePath ? ` at ${first.instancePath}` : "";
    const allowed = Array.isArray(first?.params.allowedValues) ? ` (${(first.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(", ")})` : "";
    throw new SchemaProblem(`is not valid JSON Schema${where}: ${first?.message ?? "invalid"}${allowed}`);
  }
  let validate: ValidateFunction;
  try {
    validate = ajv.compile(schema);
  } catch (err) {
    const why = (err as Error).message.replace(/^strict mode: /, "").replace(/^Invalid regular expression: /, "a pattern is not a valid regular expression: ");
    throw new SchemaProblem(`is not valid JSON Schema: ${why}`);
  }
  if (strict.length) throw new SchemaProblem(`is not valid JSON Schema: ${strict[0]}`);
  return (value) => {
    if (validate(value)) return [];
    const out = new Set<string>();
    for (const e of validate.errors ?? []) {
      out.add(describe(e));
      if (out.size >= MAX_ISSUES) break;
    }
    return [...out];
  };
}

/** One ajv error as the model reads it: "$.path: what is wrong". */
function describe(e: ErrorObject): string {
  const p = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case "required":
      return `${path(`${e.instancePath}/${escape(String(p.missingProperty))}`)}: required`;
    case "additionalProperties":
      return `${path(`${e.instancePath}/${escape(String(p.additionalProperty))}`)}: not allowed`;
    case "enum":
      return `${path(e.instancePath)}: must be one of ${(p.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(", ")}`;
    case "const":
      return `${path(e.instancePath)}: must be ${JSON.stringify(p.allowedValue)}`;
    case "type":
      return `${path(e.instancePath)}: must be ${String(p.type).replace(/,/g, " or ")}, got ${kind(e.data)}`;
    default:
      return `${path(e.instancePath)}: ${e.message ?? e.keyword}`;
  }
}

function escape(key: string): string {
  return key.replace(/~/g, "~0").replace(/\//g, "~1");
}

/** A JSON pointer as "$.a[2].b" (keys that are not identifiers in brackets). */
function path(pointer: string): string {
  let out = "$";
  for (const raw of pointer.split("/").slice(1)) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    out += /^\d+$/.test(key) ? `[${key}]` : /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
  }
  return out;
}

function kind(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  return `${typeof value} ${JSON.stringify(value)?.slice(0, 40)}`;
}
