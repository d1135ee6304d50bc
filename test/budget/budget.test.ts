/**
 * Budgets, usage roll-up and admission in the engine (in process, stages
 * through the in-process executor, the openai runner against the fake
 * server): totals across child runs are exact integer sums; a child's own
 * budget blocks it and its parent; token budgets; warnings at a percent;
 * per-user session slots across runs (and stale slots of dead processes);
 * host-pressure pacing; `show`'s waiting reasons.
 */

import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { workflow, v } from "../../src/sdk/index.ts";
import { InProcessExecutor } from "../../src/runners/stage-executor.ts";
import { buildRunReport } from "../../src/engine/run-report.ts";
import { Admission } from "../../src/engine/admission.ts";
import { openAdmissionSlots } from "../../src/journal/open.ts";
import { BudgetLedger, limitsOf } from "../../src/engine/budget.ts";
import { reportTotals } from "../../src/status/totals.ts";
import { RunSummaries } from "../../src/status/summaries.ts";
import { deferred, engineAfterEach, waitUntil, withEngine, type Engine } from "../engine/helpers.ts";
import { startFakeOpenAI, text, type FakeOpenAI } from "../helpers/fake-openai.ts";
import { makeTempDir } from "../helpers/temp.ts";

let server: FakeOpenAI;

beforeEach(async () => {
  server = await startFakeOpenAI(() => text("ok", { prompt: 10, completion: 2, cost: 0.000333 }));
});
afterEach(async () => {
  await server.close();
  await engineAfterEach();
});

/**
 * Config for the engine fixture's home: the fake server (loopback: no key needed), and extras. Host
 * pressure never paces these runs (a machine shared by other work often has a load per CPU above the
 * default limit); the pacing has a test of its own.
 */
function configure(fx: Engine, extra: Record<string, unknown> = {}): void {
  const admission = { maxLoadPerCpu: 1e9, minFreeMemoryMb: 0, slotsDir: join(fx.home, "slots"), ...(extra.admission as object | undefined) };
  writeFileSync(join(fx.home, "config.json"), JSON.stringify({ runner: "openai", model: "fake-model", openai: { baseUrl: server.url }, ...extra, admission }));
}

const opts = () => ({ executor: new InProcessExecutor() });

const child = workflow({
  name: "child-agents",
  inputs: { n: v.optional(v.number(), 2) },
  async run(ctx) {
    for (let i = 0; i < ctx.inputs.n; i++) await ctx.task(`c${i}`, { prompt: `child ${i}` });
    return { done: ctx.inputs.n };
  },
});

describe("usage roll-up", () => {
  test("totals across child runs are the exact sum of per-stage usage", async () => {
    await withEngine(async (fx) => {
      configure(fx);
      const parent = workflow({
        name: "parent-agents",
        async run(ctx) {
          await ctx.task("p0", { prompt: "parent" });
          await ctx.workflow(child, { n: 2 });
          await ctx.parallel([{ name: "p1", prompt: "a" }, { name: "p2", prompt: "b" }]);
          return {};
        },
      });
      const out = await fx.run(parent, {}, opts());
      expect(out.status).toBe("completed");
      const report = (await buildRunReport(fx.journal, out.runId))!;
      const totals = reportTotals(report);
      expect(totals.stages.total).toBe(5);
      expect(totals.usage!.costMicroUsd).toBe(5 * 333);
      expect(totals.usage!.inputTokens).toBe(50);
      expect(totals.usage!.turns).toBe(5);
      const childStep = report.steps.find((x) => x.kind === "child")!;
      expect(reportTotals(childStep.child!).usage!.costMicroUsd).toBe(666);
      // the run list's line (from the stage index, no replay) says the same
      const line = await new RunSummaries(fx.journal).summarize((await fx.journal.getRun(out.runId))!);
      expect(line.stages).toEqual(totals.stages);
      expect(line.usage).toEqual(totals.usage);
    });
  });
});

describe("budgets", () => {
  test("a child's own budget blocks the child, and so its parent; nothing past the limit starts", async () => {
    await withEngine(async (fx) => {
      configure(fx);
      const tight = workflow({ ...child, name: "tight-child", budget: { maxCostUsd: 0.0005 } });
      const parent = workflow({
        name: "parent-tight",
        async run(ctx) {
          await ctx.workflow(tight, { n: 4 });
          await ctx.task("after", { prompt: "after" });
          return {};
        },
      });
      const out = await fx.run(parent, {}, opts());
      expect(out.status).toBe("blocked");
      expect(out.error!.code).toBe("budget_exceeded");
      expect(server.requests.length).toBe(2); // 333 + 333 ≥ 500: the third stage never started
      const report = (await buildRunReport(fx.journal, out.runId))!;
      const childRun = report.steps[0]!.child!;
      expect(childRun.run.status).toBe("blocked");
      expect(childRun.run.error!.message).toContain("the cost budget of $0.0005 is used up ($0.000666 spent)");
    });
  });

  test("used up during a parallel group: a live stage's call in flight finishes and is counted, no tool runs, no call or stage starts after", async () => {
    await withEngine(async (fx) => {
      configure(fx, { budget: { maxCostUsd: 0.001 } });
      // b's call is in flight when a's reply uses the budget up; it is let go only then.
      const capReached = deferred<void>();
      server.setScript((req) => {
        const first = req.body.messages.find((m) => m.role === "user")!.content!;
        if (first === "a") return { toolCalls: [{ name: "list", arguments: {} }], usage: { prompt: 10, completion: 1, cost: 0.002 } };
        return { text: `${first}: done`, usage: { prompt: 5, completion: 1, cost: 0.0001 }, hold: capReached.promise };
      });
      const wf = workflow({
        name: "parallel-budget",
        async run(ctx) {
          return ctx.parallel([{ name: "a", prompt: "a" }, { name: "b", prompt: "b" }, { name: "c", prompt: "c" }], { concurrency: 2 });
        },
      });
      const driven = await fx.start(wf, {}, opts());
      fx.onEvent((e) => {
        if (e.type === "stage_usage" && e.name === "a") capReached.resolve();
      });
      const out = await driven.run();
      expect(out.status).toBe("blocked");
      expect(out.error!.code).toBe("budget_exceeded");
      const report = (await buildRunReport(fx.journal, out.runId))!;
      expect(report.steps.map((x) => [x.name, x.status])).toEqual([
        ["a", "completed"],
        ["b", "completed"],
      ]);
      // One call each: a's tool was not run (no second call of a), no wrap-up call, c never started.
      expect(server.requests.map((q) => q.body.messages.find((m) => m.role === "user")!.content).sort()).toEqual(["a", "b"]);
      expect(server.requests.some((q) => q.aborted)).toBe(false);
      // What the provider billed is what was recorded: b's call, finished after the cap, included.
      expect(reportTotals(report).usage!.costMicroUsd).toBe(2000 + 100);
      expect(server.billed.costMicroUsd).toBe(2000 + 100);
      expect(report.steps.find((x) => x.name === "b")!.usage!.costMicroUsd).toBe(100);
    });
  });

  test("what an interrupted agent stage spent is recorded (usage_recorded) and counted in the totals", async () => {
    await withEngine(async (fx) => {
      configure(fx);
      server.setScript((req) =>
        req.body.messages.at(-1)!.role === "user" ? { toolCalls: [{ name: "list", arguments: {} }], usage: { prompt: 10, completion: 1, cost: 0.0007 } } : { text: "x", hold: new Promise(() => {}) },
      );
      const wf = workflow({ name: "interrupted-agent", async run(ctx) { return ctx.task("a", { prompt: "go" }); } });
      const driven = await fx.start(wf, {}, opts());
      fx.onEvent((e) => {
        if (e.type === "stage_usage") driven.stop("interrupted");
      });
      const out = await driven.run();
      expect(out.status).toBe("interrupted");
      const recorded = (await fx.journalEvents(driven.runId)).filter((e) => e.type === "usage_recorded");
      expect(recorded).toHaveLength(1);
      const report = (await buildRunReport(fx.journal, driven.runId))!;
      expect(report.steps[0]!.usage!.costMicroUsd).toBe(700);
      expect(report.steps[0]!.status).toBe("stopped");
      const line = await new RunSummaries(fx.journal).summarize((await fx.journal.getRun(driven.runId))!);
      expect(line.stages).toEqual(reportTotals(report).stages);
      expect(line.usage).toEqual(reportTotals(report).usage);
    });
  });

  test("a time budget: when it runs out the live stage is wrapped up and the run ends blocked", async () => {
    await withEngine(async (fx) => {
      configure(fx, { budget: { maxDurationMs: 300 } });
      server.setScript((req) => (!req.body.tools ? text("wrapped on time") : { text: "never", hold: new Promise(() => {}) }));
      const wf = workflow({
        name: "timed",
        async run(ctx) {
          const a = await ctx.task("a", { prompt: "a" });
          await ctx.task("b", { prompt: "b" });
          return { a: a.text };
        },
      });
      const out = await fx.run(wf, {}, opts());
      expect(out.status).toBe("blocked");
      expect(out.error!.message).toContain("the time budget of 0.3 s is used up");
      const report = (await buildRunReport(fx.journal, out.runId))!;
      expect(report.steps.map((x) => [x.name, x.status])).toEqual([["a", "completed"]]);
    });
  });

  test("a child's own time budget cancels its running shell stage and sleep; the child and its parent end blocked; a warning came first", async () => {
    await withEngine(async (fx) => {
      const child = workflow({
        name: "timed-child",
        budget: { maxDurationMs: 400, warnAtPercent: 50 },
        async run(ctx) {
          await ctx.parallel([() => ctx.shell("spin", "sleep 30"), () => ctx.sleep(30_000, "nap")]);
          return {};
        },
      });
      const wf = workflow({
        name: "timed-parent",
        async run(ctx) {
          await ctx.workflow(child, {});
          await ctx.shell("later", "echo never");
          return {};
        },
      });
      const out = await fx.run(wf);
      expect(out.status).toBe("blocked");
      expect(out.error!.code).toBe("budget_exceeded");
      expect(out.error!.message).toContain("the time budget of 0.4 s is used up");
      expect(fx.eventsOf("warning").map((w) => w.message).filter((m) => m.includes("50% of its time budget"))).toHaveLength(1);
      const report = (await buildRunReport(fx.journal, out.runId))!;
      expect(report.steps.map((x) => x.name)).toEqual(["timed-child"]);
      const inner = report.steps[0]!.child!;
      expect(inner.run.status).toBe("blocked");
      expect(inner.run.error!.hint).toContain("--max-duration");
      expect(inner.steps.find((x) => x.name === "nap")!.status).toBe("waiting");
    });
  });

  test("a token budget, and a warning once the warn percent is used", async () => {
    await withEngine(async (fx) => {
      configure(fx, { budget: { maxTokens: 30, warnAtPercent: 50 } });
      const wf = workflow({
        name: "tokens",
        async run(ctx) {
          for (let i = 0; i < 5; i++) await ctx.task(`t${i}`, { prompt: "x" });
          return {};
        },
      });
      const out = await fx.run(wf, {}, opts());
      expect(out.status).toBe("blocked");
      expect(out.error!.message).toContain("the token budget of 30 is used up (36 tokens)");
      expect(server.requests.length).toBe(3);
      const warnings = fx.eventsOf("warning").map((w) => w.message);
      expect(warnings.filter((w) => w.includes("of its token budget"))).toHaveLength(1);
    });
  });

  test("the ledger: live usage counts until settled; settled usage reaches every ancestor once", () => {
    const warned: string[] = [];
    const root = new BudgetLedger("r", limitsOf({ maxCostUsd: 0.01 }), undefined, (_r, m) => warned.push(m));
    const kid = root.child("c", { maxTokens: 100 });
    let exhausted = 0;
    root.onExhausted = () => exhausted++;
    kid.addLive("s1", { costMicroUsd: 4_000, inputTokens: 40 });
    expect(root.total().costMicroUsd).toBe(4_000);
    kid.settle("s1", { costMicroUsd: 5_000, inputTokens: 50, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, turns: 1 });
    expect(root.total()).toEqual({ costMicroUsd: 5_000, tokens: 50 });
    expect(kid.total()).toEqual({ costMicroUsd: 5_000, tokens: 50 });
    expect(kid.exhausted()).toBeUndefined();
    kid.addLive("s2", { inputTokens: 60 });
    expect(kid.exhausted()).toContain("token budget of 100");
    expect(root.exhausted()).toBeUndefined();
    root.addLive("s3", { costMicroUsd: 5_000 });
    expect(root.exhausted()).toContain("cost budget of $0.01");
    expect(exhausted).toBe(1);
    expect(warned.length).toBe(2);
    kid.close();
    root.close();
  });
});

describe("admission", () => {
  test("per-user slots are shared across runs; a slot of a dead process is free again", async () => {
    const dir = makeTempDir("atomic-slots-");
    const a = new Admission({ maxSessionsPerUser: 2, maxLoadPerCpu: 1e9, minFreeMemoryMb: 0 }, () => openAdmissionSlots(dir));
    const b = new Admission({ maxSessionsPerUser: 2, maxLoadPerCpu: 1e9, minFreeMemoryMb: 0 }, () => openAdmissionSlots(dir));
    const signal = new AbortController().signal;
    const t1 = await a.admit(true, signal, () => {});
    const t2 = await b.admit(true, signal, () => {});
    const reasons: string[] = [];
    let third: { release(): void } | undefined;
    const pending = b.admit(true, signal, (r) => reasons.push(r)).then((t) => (third = t));
    await waitUntil(() => reasons.length > 0, "the third session to wait");
    expect(reasons[0]).toContain("all 2 allowed for this user on this host are busy");
    expect(third).toBeUndefined();
    t1.release();
    await pending;
    // A slot held by a process that is gone (kill -9) does not count.
    t2.release();
    third!.release();
    const db = new Database(join(dir, "slots.db"));
    db.run("insert into slots (pid, start, at) values (?, ?, ?)", [2 ** 22 + 12345, 1, Date.now()]);
    db.run("insert into slots (pid, start, at) values (?, ?, ?)", [2 ** 22 + 12346, 1, Date.now()]);
    db.close();
    const slots = openAdmissionSlots(dir);
    expect(await slots.take(2)).toBeDefined();
    expect(await slots.list()).toHaveLength(1);
    slots.close();
    a.close();
    b.close();
  });

  test("host pressure paces stage starts, saying why; a stopped run stops waiting", async () => {
    // Shell stages never open the slot store.
    const adm = new Admission({ maxLoadPerCpu: -1, paceMs: 60_000 }, () => {
      throw new Error("a shell stage asked for an agent session slot");
    });
    const ctl = new AbortController();
    const first = await adm.admit(false, ctl.signal, () => {});
    first.release();
    const reasons: string[] = [];
    const second = adm.admit(false, ctl.signal, (r) => reasons.push(r));
    await waitUntil(() => reasons.length > 0, "the paced start to wait");
    expect(reasons[0]).toMatch(/^paced: host load per CPU is [\d.]+ \(above -1\)$/);
    ctl.abort(new Error("stopped"));
    await expect(second).rejects.toThrow("stopped");
    adm.close();
  });

  test("a stage waiting for a session says why in the run report (show) and the live view", async () => {
    await withEngine(async (fx) => {
      configure(fx, { admission: { maxSessionsPerRun: 1 } });
      const gate = deferred();
      server.setScript((_req, i) => (i === 0 ? { ...text("first"), hold: gate.promise } : text("second")));
      const wf = workflow({
        name: "one-at-a-time",
        async run(ctx) {
          return ctx.parallel([{ name: "a", prompt: "a" }, { name: "b", prompt: "b" }]);
        },
      });
      const driven = await fx.start(wf, {}, opts());
      const running = driven.run();
      await waitUntil(() => fx.eventsOf("step_waiting").length > 0, "a stage to wait");
      const report = await waitUntil(async () => {
        const r = await buildRunReport(fx.journal, driven.runId);
        return r?.waiting?.length ? r : undefined;
      }, "the waiting record");
      expect(report.waiting![0]!.reason).toBe("waiting for an agent session: 1 of 1 allowed for this run are busy");
      gate.resolve();
      const out = await running;
      expect(out.status).toBe("completed");
      expect((await buildRunReport(fx.journal, driven.runId))!.waiting).toBeUndefined();
      expect(server.maxConcurrent).toBe(1);
    });
  });
});
