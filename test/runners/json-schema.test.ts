/**
 * Structured-output schemas as the project uses them (src/runners/json-schema.ts:
 * ajv behind a lazily loaded bundle, @valibot/to-json-schema for valibot):
 *
 * - The official JSON Schema test suite (npm json-schema-test-suite, which
 *   ships draft3 and draft4 only) run against `schemaValidator`. The
 *   validator runs draft-07, so only the draft4 groups whose semantics
 *   draft-07 kept are run (RUN below); SKIPPED says why each other one is
 *   left out, and a few single groups inside a run file are skipped for a
 *   reason named next to them.
 * - The old hand-written validator's bugs, each fixed: `$ref` accepted
 *   anything, `oneOf` was `anyOf`, an invalid `pattern` accepted
 *   everything, `format` was never checked, `const`/`enum` compared objects
 *   by key order.
 * - Invalid schemas refused in one sentence; valibot conversion.
 * - The bundle layout: ajv and the converter are in a bundle of their own,
 *   not in the ones every worker, coordinator or CLI process loads.
 */

import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import * as v from "valibot";
import { schemaValidator, toJsonSchema } from "../../src/runners/json-schema.ts";
import { ENTRY_POINTS } from "../../src/shared/entry-points.ts";
import { UsageError } from "../../src/shared/errors.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const SUITE = join(import.meta.dir, "..", "..", "node_modules", "json-schema-test-suite", "tests", "draft4");

/** draft4 files whose semantics are the same in draft-07. */
const RUN = [
  "additionalItems",
  "additionalProperties",
  "allOf",
  "anyOf",
  "default",
  "dependencies",
  "enum",
  "items",
  "maxItems",
  "maxLength",
  "maxProperties",
  "maximum",
  "minItems",
  "minLength",
  "minProperties",
  "minimum",
  "multipleOf",
  "not",
  "oneOf",
  "pattern",
  "patternProperties",
  "properties",
  "ref",
  "required",
  "type",
  "uniqueItems",
  "optional/format",
  "optional/bignum",
];

/** draft4 files not run, and why. */
const SKIPPED: Record<string, string> = {
  definitions: "validates schemas against the draft-04 meta-schema, fetched by a remote $ref",
  refRemote: "needs remote schemas served over HTTP; atomic resolves no remote $ref (it is an invalid schema)",
  "optional/zeroTerminatedFloats": "draft4 wants 1.0 not to be an integer; JSON parsed in JavaScript cannot tell 1.0 from 1 (draft-07 calls it an integer)",
};

/** Single groups of run files whose draft4 meaning changed in draft-07, and why. */
function skipGroup(file: string, group: SuiteGroup): string | undefined {
  const text = JSON.stringify(group.schema);
  if (/"exclusive(Maximum|Minimum)":(true|false)/.test(text)) {
    return "boolean exclusiveMaximum/exclusiveMinimum is draft4; draft-07 takes a number";
  }
  if (file === "ref" && /"http:\/\/json-schema\.org\/draft-04\/schema#?"/.test(text)) return "a remote $ref to the draft-04 meta-schema";
  if (file === "ref" && /"id":/.test(text)) return "draft4's `id` is `$id` in draft-07";
  if (file === "ref" && group.description === "escaped pointer ref") return "keeps subschemas under unknown keywords, which atomic refuses (a typo would otherwise accept everything)";
  return undefined;
}

/** Single cases whose expected result changed in draft-07. */
const SKIPPED_CASES: Record<string, string> = {
  "a valid protocol-relative URI": 'draft-07 "uri" needs a scheme (a protocol-relative one is a "uri-reference")',
};

interface SuiteGroup {
  description: string;
  schema: unknown;
  tests: { description: string; data: unknown; valid: boolean }[];
}

describe("JSON Schema test suite (draft4 groups with draft-07 semantics)", () => {
  for (const file of RUN) {
    const groups = JSON.parse(readFileSync(join(SUITE, `${file}.json`), "utf8")) as SuiteGroup[];
    for (const group of groups) {
      // Left out, with the reason in skipGroup (draft4-only meaning): not run, and not listed as a skipped test.
      if (skipGroup(file, group)) continue;
      test(`${file}: ${group.description}`, async () => {
        const validate = await schemaValidator(group.schema as Record<string, unknown>);
        for (const t of group.tests.filter((c) => !(c.description in SKIPPED_CASES))) {
          const issues = validate(t.data);
          expect({ test: t.description, valid: issues.length === 0 }).toEqual({ test: t.description, valid: t.valid });
        }
      });
    }
  }

  test("every draft4 file is either run or skipped with a reason", () => {
    const listed = new Set([...RUN, ...Object.keys(SKIPPED)]);
    const files = readdirSync(SUITE, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".json"));
    expect(files.map((f) => f.replace(/\.json$/, "")).filter((n) => !listed.has(n))).toEqual([]);
  });
});

describe("the old validator's bugs, fixed", () => {
  test("$ref is followed (it used to accept anything)", async () => {
    const validate = await schemaValidator({
      type: "object",
      properties: { count: { $ref: "#/definitions/count" } },
      definitions: { count: { type: "integer", minimum: 0 } },
    });
    expect(validate({ count: 3 })).toEqual([]);
    expect(validate({ count: -1 })).toEqual(["$.count: must be >= 0"]);
    expect(validate({ count: "many" })).toEqual(['$.count: must be integer, got string "many"']);
  });

  test("oneOf means exactly one (it used to be anyOf)", async () => {
    const validate = await schemaValidator({ oneOf: [{ type: "integer" }, { type: "number", minimum: 10 }] });
    expect(validate(3)).toEqual([]);
    expect(validate(10.5)).toEqual([]);
    expect(validate(12)).toEqual(["$: must match exactly one schema in oneOf"]);
  });

  test("an invalid pattern is an invalid schema (it used to accept everything)", async () => {
    const err = await schemaValidator({ type: "string", pattern: "([a-z]" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UsageError);
    expect((err as UsageError).code).toBe("invalid_schema");
    expect((err as Error).message).toStartWith("the structured output schema is not valid JSON Schema: a pattern is not a valid regular expression");
    const validate = await schemaValidator({ type: "string", pattern: "^[a-z]+$" });
    expect(validate("abc")).toEqual([]);
    expect(validate("ab1")).toEqual(['$: must match pattern "^[a-z]+$"']);
  });

  test("format is checked (it used to be ignored)", async () => {
    const validate = await schemaValidator({
      type: "object",
      properties: { email: { type: "string", format: "email" }, at: { type: "string", format: "date-time" }, id: { type: "string", format: "uuid" } },
    });
    expect(validate({ email: "a@example.com", at: "2026-12-01T09:30:00Z", id: "0b4a2c44-5d2f-4d7e-9a55-b1f6c0d5e0aa" })).toEqual([]);
    expect(validate({ email: "not an address", at: "yesterday", id: "42" })).toEqual([
      '$.email: must match format "email"',
      '$.at: must match format "date-time"',
      '$.id: must match format "uuid"',
    ]);
  });

  test("const and enum compare objects by value, not by key order", async () => {
    const validate = await schemaValidator({
      type: "object",
      properties: { range: { const: { min: 1, max: 5 } }, pick: { enum: [{ a: 1, b: [1, 2] }, "none"] } },
    });
    expect(validate({ range: { max: 5, min: 1 }, pick: { b: [1, 2], a: 1 } })).toEqual([]);
    expect(validate({ range: { min: 1, max: 6 }, pick: { a: 1, b: [2, 1] } })).toEqual(['$.range: must be {"min":1,"max":5}', '$.pick: must be one of {"a":1,"b":[1,2]}, "none"']);
  });
});

describe("invalid schemas and valibot conversion", () => {
  async function refusal(schema: unknown): Promise<string> {
    const err = await toJsonSchema(schema).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UsageError);
    expect((err as UsageError).code).toBe("invalid_schema");
    expect((err as UsageError).hint).toContain("valibot schemas with a JSON form");
    return (err as Error).message;
  }

  test("what ajv refuses is one sentence naming the problem", async () => {
    expect(await refusal({ type: "object", requird: ["a"] })).toBe('the structured output schema is not valid JSON Schema: unknown keyword: "requird"');
    expect(await refusal({ type: "string", format: "colour" })).toStartWith('the structured output schema is not valid JSON Schema: unknown format "colour"');
    expect(await refusal({ $ref: "https://example.com/s.json" })).toStartWith("the structured output schema is not valid JSON Schema: can't resolve reference https://example.com/s.json");
    expect(await refusal({ type: "object", properties: { a: { type: "string", minLength: -1 } } })).toBe(
      "the structured output schema is not valid JSON Schema at /properties/a/minLength: must be >= 0",
    );
    expect(await refusal({ $schema: "http://json-schema.org/draft-04/schema#", type: "string" })).toBe(
      'the structured output schema names $schema "http://json-schema.org/draft-04/schema#", a dialect atomic does not validate (draft-07, the default, or 2020-12)',
    );
    expect(await refusal("a string")).toBe("the schema option must be a valibot schema or a JSON Schema object");
    expect(await refusal(v.object({ when: v.date() }))).toBe('the structured output schema cannot be described as JSON Schema: the "date" schema cannot be converted');
    expect(await refusal(v.object({ n: v.pipe(v.string(), v.transform((s) => s.length)) }))).toBe(
      'the structured output schema cannot be described as JSON Schema: the "transform" action cannot be converted',
    );
  });

  test("2020-12 when the schema names it", async () => {
    const schema = { $schema: "https://json-schema.org/draft/2020-12/schema", type: "array", prefixItems: [{ type: "string" }, { type: "integer" }], items: false };
    expect(await toJsonSchema(schema)).toBe(schema);
    const validate = await schemaValidator(schema);
    expect(validate(["a", 1])).toEqual([]);
    expect(validate(["a", "b"])).toEqual(['$[1]: must be integer, got string "b"']);
    expect(validate(["a", 1, 2])).toEqual(["$: must NOT have more than 2 items"]);
  });

  test("valibot schemas convert with @valibot/to-json-schema; validations without a JSON form are left to the root", async () => {
    const schema = v.object({
      verdict: v.picklist(["ok", "bad"]),
      score: v.pipe(v.number(), v.integer(), v.minValue(0)),
      note: v.optional(v.nullable(v.string())),
      pair: v.tuple([v.string(), v.number()]),
      name: v.pipe(v.string(), v.check((s) => s.trim() === s, "no padding")),
    });
    const json = await toJsonSchema(schema);
    expect(json).toEqual({
      type: "object",
      properties: {
        verdict: { enum: ["ok", "bad"], type: "string" },
        score: { type: "integer", minimum: 0 },
        note: { anyOf: [{ type: "string" }, { type: "null" }] },
        pair: { type: "array", items: [{ type: "string" }, { type: "number" }], minItems: 2 },
        name: { type: "string" },
      },
      required: ["verdict", "score", "pair", "name"],
    });
    const validate = await schemaValidator(json);
    expect(validate({ verdict: "ok", score: 2, pair: ["a", 1], name: "x" })).toEqual([]);
    expect(validate({ verdict: "meh", score: 2.5, pair: ["a"] })).toEqual([
      "$.name: required",
      '$.verdict: must be one of "ok", "bad"',
      "$.score: must be integer, got number 2.5",
      "$.pair: must NOT have fewer than 2 items",
    ]);
  });
});

describe("bundle layout", () => {
  afterAll(removeTempDirs);

  test("ajv and the converter are only in their own bundle (loaded when a stage has a schema; ajv also with the MCP SDK's servers)", async () => {
    const outdir = makeTempDir("atomic-bundles-");
    const root = join(import.meta.dir, "..", "..");
    const built = await Bun.build({ entrypoints: ENTRY_POINTS.map((f) => join(root, "src", f)), outdir, root: join(root, "src"), target: "bun", format: "esm",
      // As scripts/build.ts: ink's optional devtools import is not installed and never loaded.
      external: ["react-devtools-core"] });
    expect(built.success).toBe(true);
    // strings from ajv's oneOf keyword and from the valibot converter
    const markers = ["must match exactly one schema in oneOf", "cannot be converted to JSON Schema"];
    for (const entry of ENTRY_POINTS) {
      const code = readFileSync(join(outdir, entry.replace(/\.ts$/, ".js")), "utf8");
      // The MCP SDK and playwright-core bring their own ajv: the two MCP servers' bundles and playwright's have it too, and no other.
      const ajvHere = ["runners/json-schema-ajv.ts", "pool/stage-mcp.ts", "cli/mcp/server.ts", "sdk/playwright.ts"].includes(entry);
      expect({ entry, ajv: code.includes(markers[0]!), converter: code.includes(markers[1]!) }).toEqual({ entry, ajv: ajvHere, converter: entry === "runners/json-schema-ajv.ts" });
    }
  });
});
