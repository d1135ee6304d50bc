/**
 * Structured output travels as JSON Schema: the root converts a task's
 * valibot schema (functions, not data) into a JSON Schema the stage request
 * can carry to a worker, and checks a schema given as JSON Schema, both
 * before the stage starts; the runner offers it to the model and checks
 * the model's answer with `schemaValidator`. The root checks the final
 * value with the valibot schema itself as well.
 *
 * The work is done by maintained libraries (ajv, ajv-formats,
 * @valibot/to-json-schema) in json-schema-ajv.ts, a bundle loaded only
 * when a stage has a schema, so processes that never see one do not pay
 * for it at start-up. A schema that cannot be used (a valibot schema with
 * no JSON form, invalid JSON Schema) is refused with one sentence.
 */

import { UsageError } from "../shared/errors.ts";
import { importEntry } from "../shared/entry-points.ts";

export type JsonSchema = Record<string, unknown>;

type Lib = typeof import("./json-schema-ajv.ts");
let lib: Promise<Lib> | undefined;

function load(): Promise<Lib> {
  lib ??= importEntry("runners/json-schema-ajv.ts") as Promise<unknown> as Promise<Lib>;
  return lib;
}

/** A valibot schema (has `kind: "schema"` and a `~standard` property), as opposed to a JSON Schema object. */
export function isValibotSchema(value: unknown): boolean {
  return typeof value === "object" && value !== null && (value as { kind?: unknown }).kind === "schema" && "~standard" in value;
}

/** A task's `schema` option as JSON Schema, checked; throws UsageError("invalid_schema") for what cannot be used. */
export async function toJsonSchema(schema: unknown): Promise<JsonSchema> {
  const l = await load();
  return usable(l, () => {
    let json: JsonSchema;
    if (isValibotSchema(schema)) json = l.fromValibot(schema);
    else if (typeof schema === "object" && schema !== null && !Array.isArray(schema)) json = schema as JsonSchema;
    else throw new UsageError("invalid_schema", "the schema option must be a valibot schema or a JSON Schema object", { hint: HINT });
    l.compile(json);
    return json;
  });
}

/** The check of a value against `schema`: its problems ("$.items[2]: must be number"), empty when it conforms. */
export async function schemaValidator(schema: JsonSchema): Promise<(value: unknown) => string[]> {
  const l = await load();
  return usable(l, () => l.compile(schema));
}

const HINT = "use valibot schemas with a JSON form (object, array, string, number, boolean, picklist, literal, union, optional, nullable) or a JSON Schema object (draft-07, or 2020-12 named by $schema)";

function usable<T>(l: Lib, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof l.SchemaProblem) throw new UsageError("invalid_schema", `the structured output schema ${err.message}`, { hint: HINT });
    throw err;
  }
}
