/**
 * Structured output travels as JSON Schema: the root converts a task's
 * valibot schema (functions, not data) into a JSON Schema the stage request
 * can carry to a worker; the runner offers it to the model and checks the
 * model's answer against it with `validateJson` (a subset of JSON Schema:
 * what the converter emits, plus what people write by hand: type, enum,
 * const, properties, required, additionalProperties, items, prefixItems,
 * anyOf/oneOf/allOf, length, range and pattern keywords). The root checks
 * the final value with the valibot schema itself as well.
 *
 * A schema this cannot express (a transform, a date, a bigint, a custom
 * check) is refused up front with one sentence naming the path.
 */

import { UsageError } from "../shared/errors.ts";

export type JsonSchema = Record<string, unknown>;

interface VSchema {
  kind?: string;
  type?: string;
  entries?: Record<string, VSchema>;
  item?: VSchema;
  items?: VSchema[];
  options?: unknown[];
  wrapped?: VSchema;
  literal?: unknown;
  key?: VSchema;
  value?: VSchema;
  rest?: VSchema;
  pipe?: { kind?: string; type?: string; requirement?: unknown; description?: unknown; title?: unknown }[];
  default?: unknown;
}

/** A valibot schema (has `kind: "schema"` and a `~standard` property), as opposed to a JSON Schema object. */
export function isValibotSchema(value: unknown): boolean {
  return typeof value === "object" && value !== null && (value as VSchema).kind === "schema" && "~standard" in (value as object);
}

/** A task's `schema` option as JSON Schema; throws UsageError("invalid_schema") for what cannot be expressed. */
export function toJsonSchema(schema: unknown): JsonSchema {
  if (isValibotSchema(schema)) return convert(schema as VSchema, "$");
  if (typeof schema === "object" && schema !== null && !Array.isArray(schema)) {
    const s = schema as JsonSchema;
    if (typeof s.type !== "string" && !Array.isArray(s.type) && !s.anyOf && !s.oneOf && !s.enum && s.const === undefined && !s.properties) {
      throw invalid("$", "a JSON Schema needs a type (or anyOf, oneOf, enum, const, properties)");
    }
    return s;
  }
  throw invalid("$", "the schema option must be a valibot schema or a JSON Schema object");
}

function invalid(path: string, why: string): UsageError {
  return new UsageError("invalid_schema", `the structured output schema is not usable at ${path}: ${why}`, {
    hint: "use plain valibot schemas (object, array, string, number, boolean, picklist, literal, union, optional, nullable) or a JSON Schema object",
  });
}

function convert(s: VSchema, path: string): JsonSchema {
  const out = base(s, path);
  for (const action of s.pipe?.slice(1) ?? []) {
    const req = action.requirement;
    switch (action.type) {
      case "integer":
        out.type = "integer";
        break;
      case "min_value":
        out.minimum = req;
        break;
      case "max_value":
        out.maximum = req;
        break;
      case "min_length":
        out[out.type === "array" ? "minItems" : "minLength"] = req;
        break;
      case "max_length":
        out[out.type === "array" ? "maxItems" : "maxLength"] = req;
        break;
      case "length":
        if (out.type === "array") out.minItems = out.maxItems = req;
        else out.minLength = out.maxLength = req;
        break;
      case "regex":
        if (req instanceof RegExp) out.pattern = req.source;
        break;
      case "email":
        out.format = "email";
        break;
      case "url":
        out.format = "uri";
        break;
      case "uuid":
        out.format = "uuid";
        break;
      case "description":
        out.description = action.description;
        break;
      case "title":
        out.title = action.title;
        break;
      case "non_empty":
        out[out.type === "array" ? "minItems" : "minLength"] = 1;
        break;
      default:
        if (action.kind === "transformation") throw invalid(path, `the ${action.type} transformation cannot be described to a model`);
      // other validations and metadata: checked by valibot in the root, not described
    }
  }
  return out;
}

function base(s: VSchema, path: string): JsonSchema {
  switch (s.type) {
    case "string":
    case "number":
    case "boolean":
    case "null":
      return { type: s.type };
    case "any":
    case "unknown":
      return {};
    case "literal":
      return { const: s.literal };
    case "picklist":
    case "enum":
      return { enum: s.options };
    case "object":
    case "strict_object":
    case "loose_object":
    case "object_with_rest": {
      const properties: Record<string, JsonSchema> = {};
      const required: string[] = [];
      for (const [key, entry] of Object.entries(s.entries ?? {})) {
        properties[key] = convert(entry, `${path}.${key}`);
        if (!isOptional(entry)) required.push(key);
      }
      const out: JsonSchema = { type: "object", properties, required };
      if (s.type === "strict_object") out.additionalProperties = false;
      if (s.type === "object_with_rest" && s.rest) out.additionalProperties = convert(s.rest, `${path}[rest]`);
      return out;
    }
    case "array":
      return { type: "array", items: convert(s.item!, `${path}[]`) };
    case "tuple":
    case "strict_tuple":
    case "loose_tuple":
      return { type: "array", prefixItems: (s.items ?? []).map((x, i) => convert(x, `${path}[${i}]`)), minItems: s.items?.length ?? 0 };
    case "record":
      return { type: "object", additionalProperties: convert(s.value!, `${path}[value]`) };
    case "optional":
    case "exact_optional":
    case "undefinedable":
      return convert(s.wrapped!, path);
    case "nullable":
    case "nullish":
      return { anyOf: [convert(s.wrapped!, path), { type: "null" }] };
    case "union":
    case "variant":
      return { anyOf: (s.options as VSchema[]).map((o, i) => convert(o, `${path}|${i}`)) };
    default:
      throw invalid(path, `valibot's ${s.type ?? "unknown"} schema has no JSON form`);
  }
}

function isOptional(s: VSchema): boolean {
  return s.type === "optional" || s.type === "exact_optional" || s.type === "nullish" || s.type === "undefinedable";
}

/** Problems of `value` against `schema` ("$.items[2]: expected a number"); empty when it conforms. */
export function validateJson(value: unknown, schema: JsonSchema, path = "$", out: string[] = []): string[] {
  if (out.length >= 20) return out;
  if (schema.const !== undefined && !deepEqual(value, schema.const)) out.push(`${path}: expected ${JSON.stringify(schema.const)}`);
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => deepEqual(e, value))) {
    out.push(`${path}: expected one of ${schema.enum.map((e) => JSON.stringify(e)).join(", ")}`);
  }
  for (const key of ["anyOf", "oneOf"] as const) {
    const options = schema[key];
    if (Array.isArray(options) && !options.some((o) => validateJson(value, o as JsonSchema, path).length === 0)) {
      out.push(`${path}: matches none of the allowed shapes`);
    }
  }
  if (Array.isArray(schema.allOf)) for (const o of schema.allOf) validateJson(value, o as JsonSchema, path, out);
  const types = schema.type === undefined ? undefined : Array.isArray(schema.type) ? (schema.type as string[]) : [schema.type as string];
  if (types && !types.some((t) => hasType(value, t))) {
    out.push(`${path}: expected ${types.join(" or ")}, got ${describe(value)}`);
    return out;
  }
  if (typeof value === "string") {
    if (typeof schema.minLength === "number" && value.length < schema.minLength) out.push(`${path}: shorter than ${schema.minLength} characters`);
    if (typeof schema.maxLength === "number" && value.length > schema.maxLength) out.push(`${path}: longer than ${schema.maxLength} characters`);
    if (typeof schema.pattern === "string" && !safeRegex(schema.pattern).test(value)) out.push(`${path}: does not match /${schema.pattern}/`);
  }
  if (typeof value === "number") {
    if (typeof schema.minimum === "number" && value < schema.minimum) out.push(`${path}: less than ${schema.minimum}`);
    if (typeof schema.maximum === "number" && value > schema.maximum) out.push(`${path}: more than ${schema.maximum}`);
    if (typeof schema.exclusiveMinimum === "number" && value <= schema.exclusiveMinimum) out.push(`${path}: not more than ${schema.exclusiveMinimum}`);
    if (typeof schema.exclusiveMaximum === "number" && value >= schema.exclusiveMaximum) out.push(`${path}: not less than ${schema.exclusiveMaximum}`);
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === "number" && value.length < schema.minItems) out.push(`${path}: fewer than ${schema.minItems} items`);
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems) out.push(`${path}: more than ${schema.maxItems} items`);
    const prefix = Array.isArray(schema.prefixItems) ? (schema.prefixItems as JsonSchema[]) : [];
    value.forEach((item, i) => {
      const s = prefix[i] ?? (isSchema(schema.items) ? schema.items : undefined);
      if (s) validateJson(item, s, `${path}[${i}]`, out);
    });
  } else if (isPlainObject(value)) {
    const props = isSchema(schema.properties) ? (schema.properties as Record<string, JsonSchema>) : {};
    for (const key of Array.isArray(schema.required) ? (schema.required as string[]) : []) {
      if (!(key in value)) out.push(`${path}.${key}: required`);
    }
    for (const [key, v] of Object.entries(value)) {
      if (props[key]) validateJson(v, props[key], `${path}.${key}`, out);
      else if (schema.additionalProperties === false) out.push(`${path}.${key}: not allowed`);
      else if (isSchema(schema.additionalProperties)) validateJson(v, schema.additionalProperties, `${path}.${key}`, out);
    }
  }
  return out;
}

function hasType(value: unknown, type: string): boolean {
  switch (type) {
    case "string":
      return typeof value === "string";
    case "number":
      return typeof value === "number" && Number.isFinite(value);
    case "integer":
      return Number.isInteger(value);
    case "boolean":
      return typeof value === "boolean";
    case "null":
      return value === null;
    case "array":
      return Array.isArray(value);
    case "object":
      return isPlainObject(value);
    default:
      return true;
  }
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `${typeof value} ${JSON.stringify(value)?.slice(0, 40)}`;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isSchema(v: unknown): v is JsonSchema {
  return isPlainObject(v);
}

function safeRegex(pattern: string): RegExp {
  try {
    return new RegExp(pattern, "u");
  } catch {
    return /(?:)/;
  }
}

function deepEqual(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
