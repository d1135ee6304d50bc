/**
 * The compiled message check (src/pool/protocol/fast-check.ts) must accept
 * a value exactly when valibot would parse it and hand it back unchanged:
 * checked on real protocol messages, then on thousands of random mutations
 * of them (keys dropped, added, retyped, NaN, null, nested damage).
 */

import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import * as v from "valibot";
import { compileCheck } from "../../src/pool/protocol/fast-check.ts";
import { parseMessage } from "../../src/pool/protocol/common.ts";
import { FromWorkerSchema, ToWorkerSchema } from "../../src/pool/protocol/coordinator-worker.ts";
import { CoordinatorConfigSchema, FromCoordinatorSchema, ToCoordinatorSchema } from "../../src/pool/protocol/root-coordinator.ts";

const ref = { workId: "work_1", generation: 2, epoch: 1 };
const result = { status: "completed", text: "hi\n", exitCode: 0, outputPath: "/a/stdout.log", errorPath: "/a/stderr.log" };
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
  [ToWorkerSchema, { type: "receipt", opId: "w1:3", status: "committed" }],
  [ToWorkerSchema, { type: "start", workId: "work_2", generation: 1, epoch: 1, request, receipt: { opId: "w1:3", status: "stale" } }],
  [ToWorkerSchema, { type: "deliver", workId: "work_1", message: { id: "m", text: "t" }, mode: "steer" }],
  [ToWorkerSchema, { type: "shutdown" }],
  [FromWorkerSchema, { type: "complete", opId: "w1:4", ref, result }],
  [FromWorkerSchema, { type: "complete", opId: "w1:4", ref, result: { ...result, status: "failed", exitCode: null, error: { code: "exit_code", message: "exited with code 1" } } }],
  [FromWorkerSchema, { type: "started", ref, pgid: 123 }],
  [FromWorkerSchema, { type: "heartbeat", opId: "w1:5", refs: [ref, ref] }],
  [FromWorkerSchema, { type: "events", ref, events: [{ type: "output", stream: "stdout", text: "x" }, { type: "usage", usage: { inputTokens: 3 } }] }],
  [FromCoordinatorSchema, { type: "work_done", workId: "work_1", result: { ...result, workerId: "w1", generation: 1 } }],
  [ToCoordinatorSchema, { type: "work_ready" }],
];

/** What the check must answer: valibot parses it and returns an equal value. */
function valibotKeepsIt(schema: v.GenericSchema, value: unknown): boolean {
  const parsed = v.safeParse(schema, value);
  return parsed.success && Bun.deepEquals(parsed.output, value, true);
}

function rng(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    return s / 0x7fffffff;
  };
}

const replacements: unknown[] = [undefined, null, 0, Number.NaN, -1, "", "x", true, [], {}, [1], { type: "start" }];

/** A copy of `value` with one random change somewhere inside it. */
function mutate(value: unknown, rand: () => number): unknown {
  if (typeof value !== "object" || value === null) return replacements[Math.floor(rand() * replacements.length)];
  const copy: Record<string, unknown> | unknown[] = Array.isArray(value) ? [...value] : { ...(value as Record<string, unknown>) };
  const keys = Object.keys(copy);
  const roll = rand();
  if (roll < 0.15 || keys.length === 0) {
    (copy as Record<string, unknown>)[["extra", "type", "ref", "status", "0"][Math.floor(rand() * 5)]!] = replacements[Math.floor(rand() * replacements.length)];
  } else {
    const key = keys[Math.floor(rand() * keys.length)]!;
    if (roll < 0.3) delete (copy as Record<string, unknown>)[key];
    else (copy as Record<string, unknown>)[key] = mutate((copy as Record<string, unknown>)[key], rand);
  }
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
    const rand = rng(7);
    let accepted = 0;
    let rejected = 0;
    for (let i = 0; i < 20_000; i++) {
      const [schema, msg] = samples[i % samples.length]!;
      let value = msg;
      const depth = 1 + Math.floor(rand() * 3);
      for (let d = 0; d < depth; d++) value = mutate(value, rand);
      const want = valibotKeepsIt(schema, value);
      const got = compileCheck(schema)(value);
      if (got !== want) throw new Error(`check said ${got}, valibot ${want}, for ${JSON.stringify(value)}`);
      if (got) accepted++;
      else rejected++;
    }
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
