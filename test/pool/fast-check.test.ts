/**
 * The compiled message check (src/pool/protocol/fast-check.ts) must accept
 * a value exactly when valibot would parse it and hand it back unchanged:
 * checked on real protocol messages, then on thousands of random mutations
 * of them (keys dropped, added, retyped, NaN, null, nested damage). ("Fast
 * check" is the module's name: a quick check of messages; the random
 * mutations come from the fast-check library.)
 *
 * The mutation property runs under fast-check: a failure prints its seed
 * and shrinks to a smallest message the two disagree on. Replay it with
 * `FC_SEED=<seed> [FC_PATH=<path>] bun test test/pool/fast-check.test.ts`
 * (test/helpers/fast-check.ts).
 */

import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import fc from "fast-check";
import * as v from "valibot";
import { compileCheck } from "../../src/pool/protocol/fast-check.ts";
import { parseMessage } from "../../src/pool/protocol/common.ts";
import type { StageRequest } from "../../src/runners/types.ts";
import { FromWorkerSchema, ToWorkerSchema } from "../../src/pool/protocol/coordinator-worker.ts";
import { CoordinatorConfigSchema, FromCoordinatorSchema, ToCoordinatorSchema } from "../../src/pool/protocol/root-coordinator.ts";
import { fcParams } from "../helpers/fast-check.ts";

const ref = { workId: "work_1", generation: 2, epoch: 1 };
const result = { status: "completed", text: "hi\n", exitCode: 0, outputPath: "/a/stdout.log", errorPath: "/a/stderr.log" };
// Every field a StageRequest can have (the type checker says when one is missing: `satisfies Required`), so a
// field added to the type but not to StageRequestSchema makes every start message take valibot's slow path here.
const fullRequest = {
  runId: "run_1",
  stageKey: "0.3",
  stageName: "build",
  attempt: 1,
  runner: "openai",
  command: "make",
  argv: ["make", "-j2"],
  prompt: "p",
  model: "m",
  cwd: "/src",
  cwdOption: "src",
  queue: "gpu",
  protocol: 4,
  env: { A: "1", KEY: true },
  timeoutMs: 1000,
  artifactDir: "/a",
  workId: "work_1",
  initialMessages: [{ id: "m1", text: "go" }],
  agent: { tools: ["read"], maxTurns: 3 },
  continueFrom: { sessionId: "s", artifactDir: "/b", fork: false },
} satisfies Required<StageRequest>;
const request = {
  runId: "run_1",
  stageKey: "0.3",
  stageName: "build",
  attempt: 1,
  runner: "shell",
  command: "make",
  cwd: "/src",
  env: { A: "1" },
  artifactDir: "/a",
  workId: "work_1",
  initialMessages: [{ id: "m1", text: "go" }],
};

const samples: [v.GenericSchema, unknown][] = [
  [ToWorkerSchema, { type: "start", workId: "work_1", generation: 1, epoch: 1, request }],
  [ToWorkerSchema, { type: "start", workId: "work_3", generation: 1, epoch: 1, request: fullRequest }],
  [ToWorkerSchema, { type: "receipt", opId: "w1:3", status: "committed" }],
  [ToWorkerSchema, { type: "start", workId: "work_2", generation: 1, epoch: 1, request, receipt: { opId: "w1:3", status: "stale" } }],
  [ToWorkerSchema, { type: "deliver", workId: "work_1", message: { id: "m", text: "t" }, mode: "steer" }],
  [ToWorkerSchema, { type: "shutdown" }],
  [FromWorkerSchema, { type: "complete", opId: "w1:4", ref, result }],
  [FromWorkerSchema, { type: "complete", opId: "w1:4", ref, result: { ...result, status: "failed", exitCode: null, error: { code: "exit_code", message: "exited with code 1" } } }],
  [FromWorkerSchema, { type: "started", ref, pgid: 123 }],
  [FromWorkerSchema, { type: "heartbeat", opId: "w1:5", refs: [ref, ref] }],
  [FromWorkerSchema, { type: "events", ref, events: [{ type: "output", stream: "stdout", text: "x" }, { type: "usage", usage: { inputTokens: 3 } }] }],
  [FromCoordinatorSchema, { type: "work_done", items: [{ workId: "work_1", result: { ...result, workerId: "w1", generation: 1 } }] }],
  [ToCoordinatorSchema, { type: "work_ready" }],
];

/** What the check must answer: valibot parses it and returns an equal value. */
function valibotKeepsIt(schema: v.GenericSchema, value: unknown): boolean {
  const parsed = v.safeParse(schema, value);
  return parsed.success && Bun.deepEquals(parsed.output, value, true);
}

const replacements: unknown[] = [undefined, null, 0, Number.NaN, -1, "", "x", true, [], {}, [1], { type: "start" }];

/**
 * One change somewhere inside a message, as data (so fast-check can shrink
 * it): walk down `path` (each number picks a key of the object or array
 * reached, modulo its keys), then at an object either add a key or delete
 * one; a plain value reached is replaced.
 */
interface Mutation {
  path: number[];
  action: { kind: "add"; key: string; value: unknown } | { kind: "delete"; pick: number } | { kind: "replace"; value: unknown };
}

const value = fc.oneof(fc.constantFrom(...replacements), fc.integer(), fc.double(), fc.string({ maxLength: 4 }));
const mutation: fc.Arbitrary<Mutation> = fc.record({
  path: fc.array(fc.nat(20), { maxLength: 5 }),
  action: fc.oneof(
    fc.record({ kind: fc.constant("add" as const), key: fc.constantFrom("extra", "type", "ref", "status", "0"), value }),
    fc.record({ kind: fc.constant("delete" as const), pick: fc.nat(20) }),
    fc.record({ kind: fc.constant("replace" as const), value }),
  ),
});

/** A copy of `value` with `m` applied (the original is never changed). */
function mutate(value: unknown, m: Mutation, depth = 0): unknown {
  if (typeof value !== "object" || value === null) return m.action.kind === "delete" ? undefined : m.action.value;
  const copy: Record<string, unknown> | unknown[] = Array.isArray(value) ? [...value] : { ...(value as Record<string, unknown>) };
  const record = copy as Record<string, unknown>;
  const keys = Object.keys(copy);
  if (depth < m.path.length && keys.length > 0) {
    const key = keys[m.path[depth]! % keys.length]!;
    record[key] = mutate(record[key], m, depth + 1);
  } else if (m.action.kind === "add" || keys.length === 0) {
    record[m.action.kind === "add" ? m.action.key : "extra"] = m.action.kind === "delete" ? undefined : m.action.value;
  } else if (m.action.kind === "delete") delete record[keys[m.action.pick % keys.length]!];
  else record[keys[(m.path.at(-1) ?? 0) % keys.length]!] = m.action.value;
  return copy;
}

describe("compiled message checks", () => {
  test("real protocol messages pass, and parseMessage hands them back as they came", () => {
    for (const [schema, msg] of samples) {
      expect(valibotKeepsIt(schema, msg)).toBe(true);
      expect(compileCheck(schema)(msg)).toBe(true);
      expect(parseMessage(schema, msg, "test")).toBe(msg as never);
    }
  });

  test("on 20,000 random mutations the check accepts exactly what valibot would return unchanged", () => {
    let accepted = 0;
    let rejected = 0;
    const sample = fc.nat(samples.length - 1);
    fc.assert(
      fc.property(sample, fc.array(mutation, { minLength: 1, maxLength: 3 }), (i, mutations) => {
        const [schema, msg] = samples[i]!;
        const value = mutations.reduce<unknown>((v, m) => mutate(v, m), msg);
        const want = valibotKeepsIt(schema, value);
        const got = compileCheck(schema)(value);
        if (got) accepted++;
        else rejected++;
        // A failure names the value; fast-check adds the seed, the path and the shrunk case.
        expect({ check: got, value }).toEqual({ check: want, value });
      }),
      fcParams(20_000),
    );
    // Both answers were exercised many times.
    expect(accepted).toBeGreaterThan(500);
    expect(rejected).toBeGreaterThan(5_000);
  });

  test("extra keys and unsupported schemas fall back to valibot, which strips or refuses", () => {
    const withExtra = { type: "shutdown", note: "x" };
    expect(compileCheck(ToWorkerSchema)(withExtra)).toBe(false);
    expect(parseMessage(ToWorkerSchema, withExtra, "test")).toEqual({ type: "shutdown" });
    // A schema with a pipe of actions (the config's workers: integer >= 1) never takes the fast path.
    expect(compileCheck(CoordinatorConfigSchema)({ workers: 1 })).toBe(false);
    expect(compileCheck(v.pipe(v.number(), v.integer()))(1)).toBe(false);
    // A default would be filled in by valibot: never the fast path.
    expect(compileCheck(v.object({ a: v.optional(v.string(), "d") }))({})).toBe(false);
    expect(compileCheck(v.object({ a: v.optional(v.string()) }))({})).toBe(true);
  });

  test("a malformed message is dropped with one log line naming where", async () => {
    // The line goes straight to file descriptor 2 (shared/raw-stderr.ts): checked in a process of its own.
    const script = `
      import { parseMessage } from ${JSON.stringify(join(import.meta.dir, "../../src/pool/protocol/common.ts"))};
      import { FromWorkerSchema } from ${JSON.stringify(join(import.meta.dir, "../../src/pool/protocol/coordinator-worker.ts"))};
      const msg = { type: "complete", opId: "w1:4", ref: ${JSON.stringify({ ...ref, epoch: "one" })}, result: ${JSON.stringify(result)} };
      process.exit(parseMessage(FromWorkerSchema, msg, "worker w1") === undefined ? 0 : 1);
    `;
    const proc = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe" });
    const [code, stderr] = await Promise.all([proc.exited, new Response(proc.stderr).text()]);
    expect(code).toBe(0);
    expect(stderr.trim().split("\n")).toEqual([expect.stringMatching(/^\[pool\] dropped a malformed message from worker w1 at ref\.epoch: /)]);
  });
});
