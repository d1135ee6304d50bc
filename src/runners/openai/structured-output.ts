/**
 * The `structured_output` tool of an openai stage whose task has a schema:
 * its spec (an object schema is the tool's parameters as it is; any other
 * schema is wrapped as `{ value }`), and the check of the model's call
 * against the schema.
 */

import type { JsonSchema } from "../json-schema.ts";

export const STRUCTURED_TOOL = "structured_output";

/** The schema is not an object: the tool's parameters wrap it as { value }. */
export function isWrapped(schema: JsonSchema): boolean {
  return schema.type !== "object";
}

export function structuredSpec(schema: JsonSchema) {
  const parameters = isWrapped(schema) ? { type: "object", properties: { value: schema }, required: ["value"] } : schema;
  return {
    type: "function" as const,
    function: { name: STRUCTURED_TOOL, description: "Give your final answer as structured data matching this schema. Call it exactly once, when done.", parameters },
  };
}

/** The value of a structured_output call, or what is wrong with it. */
export function checkStructured(rawArgs: string, schema: JsonSchema, validate: (value: unknown) => string[]): { value: unknown; issues: string[] } {
  const wrapped = isWrapped(schema);
  let value: unknown;
  let issues: string[];
  try {
    const parsed = JSON.parse(rawArgs || "null") as unknown;
    value = wrapped ? (parsed as { value?: unknown } | null)?.value : parsed;
    issues = wrapped && (typeof parsed !== "object" || parsed === null || !("value" in parsed)) ? ["$: missing value"] : validate(value);
  } catch {
    issues = ["the arguments are not valid JSON"];
  }
  return { value, issues };
}
