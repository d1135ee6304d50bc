/**
 * Inputs: `--input key=value` text converted to each key's schema type and
 * validated, errors naming the key. Outputs: a return value that does not
 * match the workflow's `outputs` schema fails the run with bad_outputs.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { parseInputPairs, validateInputs } from "../../src/engine/inputs.ts";
import { AtomicError } from "../../src/shared/errors.ts";
import { v, workflow } from "../../src/sdk/index.ts";
import { engineAfterEach, withEngine } from "./helpers.ts";

afterEach(engineAfterEach);

const schemas = {
  count: v.number(),
  verbose: v.boolean(),
  effort: v.optional(v.picklist(["low", "high"]), "low"),
  config: v.optional(v.object({ depth: v.number(), tags: v.array(v.string()) })),
  topic: v.string(),
};

function refusal(fn: () => unknown): AtomicError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(AtomicError);
    return err as AtomicError;
  }
  throw new Error("expected a refusal");
}

describe("parseInputPairs", () => {
  test("converts text to the schema's type and applies defaults", () => {
    const out = parseInputPairs(
      schemas,
      ["count=3.5", "verbose=yes", "topic=a=b", 'config={"depth":2,"tags":["x"]}'],
      undefined,
      "wf.ts",
    );
    expect(out).toEqual({ count: 3.5, verbose: true, effort: "low", config: { depth: 2, tags: ["x"] }, topic: "a=b" });
    const more = parseInputPairs(schemas, ["count=-2", "verbose=0", "effort=high", "topic="], undefined, "wf.ts");
    expect(more).toEqual({ count: -2, verbose: false, effort: "high", topic: "" });
  });

  test("boolean accepts true/false/yes/no/1/0/on/off in any case", () => {
    for (const [text, want] of [["TRUE", true], ["No", false], ["1", true], ["off", false]] as const) {
      expect(parseInputPairs({ b: v.boolean() }, [`b=${text}`], undefined, "wf.ts")).toEqual({ b: want });
    }
  });

  test("--inputs-json values merge with pairs; pairs win", () => {
    const out = parseInputPairs(schemas, ["count=1"], { count: 9, verbose: false, topic: "json" }, "wf.ts");
    expect(out).toEqual({ count: 1, verbose: false, effort: "low", topic: "json" });
  });

  test("refusals name the key and say what was expected", () => {
    const base = ["verbose=true", "topic=t"];
    const notNumber = refusal(() => parseInputPairs(schemas, ["count=many", ...base], undefined, "wf.ts"));
    expect(notNumber.code).toBe("bad_input");
    expect(notNumber.message).toBe('input "count" must be a number, got "many"');
    expect(refusal(() => parseInputPairs(schemas, ["count= ", ...base], undefined, "wf.ts")).message).toContain('input "count" must be a number');
    expect(refusal(() => parseInputPairs(schemas, ["count=Infinity", ...base], undefined, "wf.ts")).code).toBe("bad_input");

    const notBool = refusal(() => parseInputPairs(schemas, ["count=1", "verbose=maybe", "topic=t"], undefined, "wf.ts"));
    expect(notBool.message).toBe('input "verbose" must be true or false, got "maybe"');

    const notPick = refusal(() => parseInputPairs(schemas, ["count=1", "effort=medium", ...base], undefined, "wf.ts"));
    expect(notPick.message).toBe('input "effort" must be one of "low", "high", got "medium"');

    const notJson = refusal(() => parseInputPairs(schemas, ["count=1", "config={depth:2}", ...base], undefined, "wf.ts"));
    expect(notJson.message).toContain('input "config" must be JSON');

    const wrongShape = refusal(() => parseInputPairs(schemas, ["count=1", 'config={"depth":"deep","tags":[]}', ...base], undefined, "wf.ts"));
    expect(wrongShape.code).toBe("bad_input");
    expect(wrongShape.message).toContain('input "config.depth" is invalid');

    const missing = refusal(() => parseInputPairs(schemas, ["count=1", "verbose=true"], undefined, "wf.ts"));
    expect(missing.code).toBe("missing_input");
    expect(missing.message).toBe('input "topic" is required');
    expect(missing.hint).toContain("--input topic=VALUE");

    const unknown = refusal(() => parseInputPairs(schemas, ["colour=red"], undefined, "wf.ts"));
    expect(unknown.code).toBe("unknown_input");
    expect(unknown.message).toContain('"colour"');
    expect(unknown.hint).toContain("count, verbose, effort, config, topic");

    const noEquals = refusal(() => parseInputPairs(schemas, ["count"], undefined, "wf.ts"));
    expect(noEquals.code).toBe("bad_input");
    expect(noEquals.message).toContain("key=value");
  });
});

describe("validateInputs", () => {
  test("an unknown key is refused, listing the known ones", () => {
    const err = refusal(() => validateInputs({ a: v.string() }, { a: "x", b: 1 }, "wf.ts"));
    expect(err.code).toBe("unknown_input");
    expect(err.message).toBe('the workflow has no input named "b"');
    expect(err.hint).toContain("its inputs are: a");
  });

  test("a workflow without inputs refuses any, and accepts none", () => {
    expect(validateInputs({}, {}, "wf.ts")).toEqual({});
    const err = refusal(() => validateInputs({}, { x: 1 }, "wf.ts"));
    expect(err.code).toBe("unknown_input");
    expect(err.hint).toContain("atomic workflows --inputs wf.ts");
  });

  test("a non-object is refused", () => {
    expect(refusal(() => validateInputs({}, [] as never, "wf.ts")).code).toBe("bad_input");
    expect(refusal(() => validateInputs({}, null as never, "wf.ts")).code).toBe("bad_input");
  });

  test("typed JSON is validated as is (no text conversion)", () => {
    const err = refusal(() => validateInputs({ n: v.number() }, { n: "3" }, "wf.ts"));
    expect(err.code).toBe("bad_input");
    expect(err.message).toContain('input "n" is invalid');
  });
});

describe("workflow inputs and outputs at run time", () => {
  test("the run sees validated inputs with defaults applied, and the run row records them", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "inputs",
        inputs: { issue: v.string(), effort: v.optional(v.picklist(["low", "high"]), "low") },
        run: async (ctx) => ({ ...ctx.inputs }),
      });
      const out = await fx.run(wf, { issue: "bug 1" });
      expect(out.outputs).toEqual({ issue: "bug 1", effort: "low" });
      expect((await fx.getRun(out.runId)).inputs).toEqual({ issue: "bug 1", effort: "low" });
    });
  });

  test("a return value that does not match `outputs` fails the run with bad_outputs, naming the path", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "outputs",
        outputs: v.object({ score: v.number(), tags: v.array(v.string()) }),
        run: async () => ({ score: 1, tags: ["ok", 2] }) as never,
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("bad_outputs");
      expect(out.error?.message).toContain('at "tags.1"');
      const row = await fx.getRun(out.runId);
      expect(row.status).toBe("failed");
      expect(row.outputs).toBeNull();
    });
  });

  test("outputs are stored as the schema's output (transforms applied)", async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "outputs-ok",
        outputs: v.object({ name: v.pipe(v.string(), v.trim()) }),
        run: async () => ({ name: "  padded  ", extra: true }),
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual({ name: "padded" });
      expect((await fx.getRun(out.runId)).outputs).toEqual({ name: "padded" });
    });
  });

  test("a return value that is not JSON fails the run clearly", async () => {
    await withEngine(async (fx) => {
      const out = await fx.run(workflow({ name: "outputs-bigint", run: async () => ({ n: 1n }) }));
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("not_serializable");
      expect(out.error?.message).toContain("the workflow");
    });
  });
});
