/**
 * testRun (src/testing/test-run.ts) from source: scripted agents (replies,
 * tool calls, usage, errors, provider failures, timeouts), stubbed and
 * real shell stages, a real agent runner (openai, against the fake
 * provider), messages, answers, the virtual clock and a crash then resume
 * (at a stage, and inside a tool step). The same through `atomic test` and
 * the binary is test/testing/atomic-test.test.ts.
 */

import { expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { workflow, v } from "../../src/sdk/index.ts";
import { testRun } from "../../src/testing/test-run.ts";
import { startFakeOpenAI, text, type RecordedRequest } from "../helpers/fake-openai.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const DAY = 86_400_000;

const review = workflow({
  name: "review",
  inputs: { topic: v.string() },
  async run(ctx) {
    const draft = await ctx.task("draft", { prompt: `write about ${ctx.inputs.topic}` });
    const critique = await ctx.task("critique", { prompt: `criticise: ${draft.text}` });
    const count = await ctx.tool("count", { text: draft.text }, () => draft.text.length);
    await ctx.sleep(30 * DAY, "cool-off");
    const go = await ctx.ask("Publish it?", { name: "publish", choices: ["yes", "no"] });
    const stamp = await ctx.shell("stamp", "date +%s");
    return { draft: draft.text, critique: critique.text, count, go, stamp: stamp.text.trim() };
  },
});

test("two scripted agents, a 30-day sleep, an answer and a stubbed shell stage complete at once", async () => {
  const result = await testRun(review, {
    inputs: { topic: "tides" },
    agents: {
      draft: [{ text: "Tides rise.", toolCalls: [{ name: "read", input: { path: "notes.md" }, output: "moon" }], usage: { inputTokens: 120, outputTokens: 8, costMicroUsd: 42 } }],
      "crit*": "Too short.",
    },
    answers: { publish: "yes" },
    shell: { stamp: { stdout: "1700000000\n" } },
  });
  expect(result.status).toBe("completed");
  expect(result.outputs).toEqual({ draft: "Tides rise.", critique: "Too short.", count: 11, go: "yes", stamp: "1700000000" });
  expect(result.steps.map((s) => [s.kind, s.name, s.replayed])).toEqual([
    ["stage", "draft", false],
    ["stage", "critique", false],
    ["tool", "count", false],
    ["sleep", "cool-off", false],
    ["ask", "publish", false],
    ["stage", "stamp", false],
  ]);
  expect(result.virtualMs).toBe(30 * DAY);
  expect(result.stages.draft!.usage).toMatchObject({ inputTokens: 120, outputTokens: 8, costMicroUsd: 42, turns: 1 });
  expect(result.stages.draft!.transcript).toContain("## tool read");
  expect(result.stages.draft!.transcript).toContain("write about tides");
  expect(result.stages.critique!.transcript).toContain("criticise: Tides rise.");
  expect(result.crashed).toBe(false);
});

test("a crash at a stage, then resume: what was recorded is replayed, the crashed stage runs again", async () => {
  let toolRuns = 0;
  const wf = workflow({
    name: "crashy",
    async run(ctx) {
      const a = await ctx.task("first", { prompt: "one" });
      const n = await ctx.tool("side-effect", {}, () => ++toolRuns);
      await ctx.sleep(7 * DAY);
      const b = await ctx.task("second", { prompt: "two" });
      return { a: a.text, b: b.text, n };
    },
  });
  const result = await testRun(wf, { agents: { first: "A", second: "B" }, crashAt: "second" });
  expect(result.crashed).toBe(true);
  expect(result.status).toBe("completed");
  expect(result.outputs).toEqual({ a: "A", b: "B", n: 1 });
  expect(toolRuns).toBe(1);
  const second = result.steps.filter((s) => s.drive === 2).map((s) => [s.kind, s.name, s.replayed]);
  expect(second).toEqual([
    ["stage", "first", true],
    ["tool", "side-effect", true],
    ["sleep", "sleep", true],
    ["stage", "second", false],
  ]);
  expect(result.stages.second!.attempts).toBe(1);
  expect(result.stages.first!.attempts).toBe(1);
});

test("a crash at a tool step lands between its function's end and its checkpoint: the resumed run calls it again, with the same idempotency key", async () => {
  const calls: string[] = [];
  const wf = workflow({
    name: "charge",
    async run(ctx) {
      const receipt = await ctx.tool("charge", { cents: 500 }, ({ idempotencyKey }) => (calls.push(idempotencyKey), `receipt-${calls.length}`));
      const after = await ctx.tool("after", {}, () => "done");
      return { receipt, after };
    },
  });
  const result = await testRun(wf, { crashAt: "charge" });
  expect(result.crashed).toBe(true);
  expect(result.status).toBe("completed");
  expect(result.outputs).toEqual({ receipt: "receipt-2", after: "done" });
  expect(calls).toHaveLength(2);
  expect(calls[1]).toBe(calls[0]!);
  expect(result.steps.map((s) => [s.drive, s.name, s.replayed])).toEqual([
    [1, "charge", false],
    [2, "charge", false],
    [2, "after", false],
  ]);
});

test("a stage no script matches runs its real runner, configured as atomic run would (ATOMIC_OPENAI_BASE_URL); messages reach real and scripted stages; a scripted timeout", async () => {
  const server = await startFakeOpenAI(() => text("from the provider"));
  const saved = { url: process.env.ATOMIC_OPENAI_BASE_URL, key: process.env.OPENAI_API_KEY };
  process.env.ATOMIC_OPENAI_BASE_URL = server.url;
  process.env.OPENAI_API_KEY = "sk-test";
  try {
    const wf = workflow({
      name: "mixed",
      async run(ctx) {
        const scripted = await ctx.task("scripted", { prompt: "one" });
        const live = await ctx.task("live", { runner: "openai", model: "fake-model", prompt: "two" });
        const slow = await ctx.task("slow", { prompt: "three", timeoutMs: DAY, failureMode: "return" });
        return { scripted: scripted.text, live: live.text, slow: slow.error?.code ?? null };
      },
    });
    const result = await testRun(wf, { agents: { scripted: "A", slow: [{ timeout: true }] }, messages: { scripted: "hello there", live: ["steer one"] } });
    expect(result.status).toBe("completed");
    expect(result.outputs).toEqual({ scripted: "A", live: "from the provider", slow: "timeout" });
    expect(server.requests).toHaveLength(1);
    const user = (r: RecordedRequest) => r.body.messages.filter((m) => m.role === "user").map((m) => m.content);
    expect(user(server.requests[0]!)).toEqual(["Messages received before you started:\n- steer one\n\ntwo"]);
    expect(server.requests[0]!.body.model).toBe("fake-model");
    expect(result.stages.live).toMatchObject({ runner: "openai", status: "completed", text: "from the provider" });
    expect(result.stages.live!.transcript).toContain("steer one");
    expect(result.stages.scripted!.transcript).toContain("## message\n\nhello there");
    expect(result.stages.slow!.error?.code).toBe("timeout");
  } finally {
    for (const [k, v] of [["ATOMIC_OPENAI_BASE_URL", saved.url], ["OPENAI_API_KEY", saved.key]] as const) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    await server.close();
  }
});

test("errors and provider failures fail the stage as a real runner's would; a real shell stage runs", async () => {
  const wf = workflow({
    name: "fails",
    async run(ctx) {
      const real = await ctx.shell("echo", ["echo", "real"]);
      try {
        await ctx.task("flaky", { prompt: "x" });
      } catch (err) {
        return { real: real.text.trim(), error: String((err as Error).message) };
      }
      return { real: real.text.trim(), error: null };
    },
  });
  const limited = await testRun(wf, { agents: { flaky: [{ providerError: "rate_limit" }] } });
  expect(limited.status).toBe("completed");
  expect(limited.outputs).toMatchObject({ real: "real" });
  expect(String((limited.outputs as { error: string }).error)).toContain("provider_rate_limit");
  expect(limited.stages.flaky!.error?.code).toBe("provider_rate_limit");
  const broken = await testRun(wf, { agents: { flaky: [{ error: "no idea" }] } });
  expect(broken.stages.flaky!.error).toEqual({ code: "agent_error", message: "no idea" });
});

test("host pressure never paces a test's stage starts (a config that would hold each start for ten minutes)", async () => {
  // Free memory is always below 10^12 MB, so `atomic run` with this config would start one stage every 600 s.
  const file = join(makeTempDir(), "config.json");
  writeFileSync(file, JSON.stringify({ admission: { minFreeMemoryMb: 1e12, paceMs: 600_000 } }));
  const saved = process.env.ATOMIC_CONFIG;
  process.env.ATOMIC_CONFIG = file;
  try {
    const wf = workflow({
      name: "three",
      async run(ctx) {
        const [a, b] = await Promise.all([ctx.task("a", { prompt: "a" }), ctx.task("b", { prompt: "b" })]);
        return { all: `${a.text}${b.text}${(await ctx.task("c", { prompt: "c" })).text}` };
      },
    });
    const result = await testRun(wf, { agents: { a: "1", b: "2", c: "3" } });
    expect(result.outputs).toEqual({ all: "123" });
    expect(result.steps.filter((s) => s.kind === "stage" && s.status === "completed").map((s) => s.name).sort()).toEqual(["a", "b", "c"]);
  } finally {
    if (saved === undefined) delete process.env.ATOMIC_CONFIG;
    else process.env.ATOMIC_CONFIG = saved;
    removeTempDirs();
  }
});

test("a question nobody answers parks the run awaiting input", async () => {
  const wf = workflow({
    name: "asks",
    async run(ctx) {
      return { a: await ctx.ask("Which?") };
    },
  });
  const result = await testRun(wf, {});
  expect(result.status).toBe("awaiting_input");
});

test("a workflow that is not one is refused in one sentence", async () => {
  await expect(testRun({} as never)).rejects.toThrow("testRun needs a workflow");
});

test("a question with a deadline and no answer times out on the virtual clock", async () => {
  const wf = workflow({
    name: "deadline",
    async run(ctx) {
      try {
        return { a: await ctx.ask("Ship it?", { name: "ship", timeoutMs: 7 * DAY }) };
      } catch (err) {
        return { timedOut: (err as { code?: string }).code };
      }
    },
  });
  const result = await testRun(wf, {});
  expect(result.status).toBe("completed");
  expect(result.outputs).toEqual({ timedOut: "ask_timeout" });
  // The clock moved on to the deadline: 7 days after the question, less the real milliseconds the run took to ask it.
  expect(result.virtualMs).toBeGreaterThan(6 * DAY);
  expect(result.steps.map((s) => [s.kind, s.name, s.status])).toEqual([["ask", "ship", "failed"]]);
});

test("stages of child workflows are scripted and reported by their path", async () => {
  const child = workflow({
    name: "summarize",
    async run(ctx) {
      return { text: (await ctx.task("report", { prompt: "sum up" })).text };
    },
  });
  const wf = workflow({
    name: "parent",
    async run(ctx) {
      const a = await ctx.task("report", { prompt: "top" });
      const b = await ctx.workflow(child, {});
      return { a: a.text, b: b.text };
    },
  });
  const result = await testRun(wf, { agents: { report: "top-level", "summarize/report": "nested" } });
  expect(result.status).toBe("completed");
  expect(result.outputs).toEqual({ a: "top-level", b: "nested" });
  expect(Object.keys(result.stages).sort()).toEqual(["report", "summarize/report"]);
});

test("a workflow that continues as new runs its chain to the end; the steps name each run, the result is the last run's", async () => {
  const counter = workflow({
    name: "counter",
    inputs: { n: v.number(), sum: v.optional(v.number(), 0) },
    async run(ctx) {
      const sum = ctx.inputs.sum + (await ctx.tool(`add-${ctx.inputs.n}`, ctx.inputs.n, () => ctx.inputs.n));
      if (ctx.inputs.n > 1) ctx.continueAsNew({ n: ctx.inputs.n - 1, sum });
      return { sum };
    },
  });
  const result = await testRun(counter, { inputs: { n: 4 } });
  expect(result.status).toBe("completed");
  expect(result.outputs).toEqual({ sum: 10 });
  const tools = result.steps.filter((s) => s.kind === "tool");
  expect(tools.map((s) => s.name)).toEqual(["add-4", "add-3", "add-2", "add-1"]);
  expect(new Set(tools.map((s) => s.runId)).size).toBe(4);
  expect(tools.at(-1)!.runId).toBe(result.runId);
});
