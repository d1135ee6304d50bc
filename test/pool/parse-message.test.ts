/**
 * Incoming pool messages are parsed by valibot at the edge
 * (src/pool/protocol/common.ts, parseMessage): real protocol messages come
 * back equal, unknown keys are stripped, and a malformed message is dropped
 * with one log line naming where.
 */

import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import * as v from "valibot";
import { parseMessage } from "../../src/pool/protocol/common.ts";
import type { StageRequest } from "../../src/runners/types.ts";
import { FromWorkerSchema, ToWorkerSchema } from "../../src/pool/protocol/coordinator-worker.ts";
import { FromCoordinatorSchema, ToCoordinatorSchema } from "../../src/pool/protocol/root-coordinator.ts";

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
  budgeted: true,
  initialMessages: [{ id: "m1", text: "go" }],
  agent: { tools: ["read"], maxTurns: 3 },
  continueFrom: { sessionId: "s", artifactDir: "/b", fork: false },
  sessionsTravel: true,
  answer: { callId: "call_1", text: "yes" },
  runTools: { rootId: "run_0", token: "run_0.t", home: "/h", siblings: ["a", "b"] },
  traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
  runEnv: { env: { LANG: "C.UTF-8" }, secrets: ["API_KEY"] },
  sandbox: { network: "provider", read: ["/home/u/.gitconfig"], write: [], hosts: ["api.example.com:443"], hidden: ["/home/u/.atomic"] },
  workspace: { remote: { name: "origin", url: "git@example.com:u/r.git" }, baseCommit: "0123abcd", branch: "atomic/run_1/0.3-build", prefix: "src" },
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
  [FromWorkerSchema, { type: "complete", opId: "w1:4", ref, result: { ...result, status: "failed", exitCode: null, error: { code: "ask_user", message: "waiting" }, askUser: { callId: "c", question: "ok?", choices: ["yes", "no"] } } }],
  [FromWorkerSchema, { type: "complete", opId: "w1:4", ref, result: { ...result, pushed: { url: "git@example.com:u/r.git", branch: "atomic/run_1/0.3-build", head: "89abcdef" } } }],
  [FromWorkerSchema, { type: "events", ref, events: [{ type: "started", at: 5 }], pgid: 123 }],
  [FromWorkerSchema, { type: "heartbeat", opId: "w1:5", refs: [ref, ref] }],
  [FromWorkerSchema, { type: "events", ref, events: [{ type: "output", stream: "stdout", text: "x" }, { type: "usage", usage: { inputTokens: 3 } }] }],
  [FromCoordinatorSchema, { type: "work_done", items: [{ workId: "work_1", result: { ...result, workerId: "w1", generation: 1 } }] }],
  [ToCoordinatorSchema, { type: "work_ready", stages: 2 }],
  [ToCoordinatorSchema, { type: "budget_counted", workId: "work_1", exhausted: false }],
  [ToCoordinatorSchema, { type: "budget_counted", exhausted: true }],
];

describe("pool message parsing", () => {
  test("real protocol messages parse to equal values", () => {
    for (const [schema, msg] of samples) expect(parseMessage(schema, msg, "test")).toEqual(msg as never);
  });

  test("unknown keys are stripped", () => {
    expect(parseMessage(ToWorkerSchema, { type: "shutdown", note: "x" }, "test")).toEqual({ type: "shutdown" });
  });

  test("a type no option names, or no object at all, is refused with the whole union's message", () => {
    // The schemas parse the option an input's type names (common.ts byType); what names none reads as v.variant's refusal.
    const issue = (schema: v.GenericSchema, input: unknown) => {
      const r = v.safeParse(schema, input);
      return r.success ? undefined : { message: r.issues[0].message, path: r.issues[0].path?.map((p) => String(p.key)).join(".") };
    };
    expect(issue(FromWorkerSchema, { type: "nope" })?.message).toBe(
      'Invalid type: Expected ("ready" | "heartbeat" | "events" | "complete" | "pong" | "commit_failed" | "control_ack" | "deliver_result") but received "nope"',
    );
    expect(issue(ToCoordinatorSchema, {})?.message).toStartWith('Invalid type: Expected ("work_ready" | "cancel_work"');
    expect(issue(ToWorkerSchema, null)?.message).toBe("Invalid type: Expected Object but received null");
    expect(issue(FromWorkerSchema, { type: "events", ref, events: [{ type: "bogus" }] })).toEqual({
      message: expect.stringMatching(/^Invalid type: Expected \("started" \| "output" \| "text_delta"/),
      path: "events.0.type",
    });
    expect(issue(FromCoordinatorSchema, { type: "work_events", batch: [{ workId: "w", events: [{ type: "usage" }] }] })).toEqual({
      message: 'Invalid key: Expected "usage" but received undefined',
      path: "batch.0.events.0.usage",
    });
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
