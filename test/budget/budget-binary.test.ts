/**
 * Budgets and admission through the real binary, stages on pool workers,
 * against the fake OpenAI-compatible server (real HTTP on 127.0.0.1):
 * - a run that exceeds --max-cost: the live stage's call in flight is not
 *   aborted and no wrap-up call is made, no new stage starts, the run ends
 *   blocked (exit 3) having recorded what the fake provider billed;
 *   `resume --max-cost` with a higher budget completes it; totals equal
 *   the sum of the per-stage usage exactly;
 * - a run that exceeds --max-duration: the call in flight is aborted, the
 *   wrap-up turn asked, the stage cancelled a grace later;
 * - admission: with at most 2 agent sessions per run, 6 parallel agent
 *   stages never have more than 2 requests in flight at the fake server.
 * Nothing here asserts a duration.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { startFakeOpenAI, text, toolCall, type RecordedRequest, type Reply } from "../helpers/fake-openai.ts";

const FIX = join(import.meta.dir, "fixtures");
afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const firstUser = (req: RecordedRequest) => req.body.messages.find((m) => m.role === "user")!.content ?? "";

e2eTest("exceeding --max-cost: no call aborted, no wrap-up call, blocked with exit 3 having recorded what was billed; resume --max-cost completes; totals are exact", async () => {
  const server = await startFakeOpenAI((req): Reply => {
    if (firstUser(req).startsWith("second")) return text("second done", { prompt: 80, completion: 8, cost: 0.001 });
    if (req.body.messages.at(-1)!.role === "user") return toolCall("list", {}, { text: "listing", usage: { prompt: 100, completion: 10, cost: 0.002 } });
    // After the tool result (when the wrap-up reached the worker only after the tool ran): a reply as usual.
    return text("first done", { prompt: 50, completion: 5, cost: 0.0005 });
  });
  try {
    const home = makeTempDir("atomic-budget-home-");
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const wf = join(FIX, "two-agents.ts");
    const r = await runAtomic(["run", wf, "--workers", "1", "--max-cost", "0.001"], { home, env });
    expect(r.code).toBe(3);
    // The first call used the budget up; a second call of the stage is made only if it had started before the
    // wrap-up reached the worker (then it finished and counts): either way, what was billed is what was recorded.
    const billed = server.billed.costMicroUsd;
    expect([2000, 2500]).toContain(billed);
    expect(r.stderr).toMatch(/run (\S+) blocked: run \S+: the cost budget of \$0\.001 is used up \(\$(\S+) spent\); no new stage starts/);
    expect(/\(\$(\S+) spent\)/.exec(r.stderr)![1]).toBe(String(billed / 1_000_000));
    expect(r.stderr).toContain("--max-cost N");
    const runId = /run (\S+) blocked/.exec(r.stderr)![1]!;
    // The live stage was wrapped up without aborting a call or asking a wrap-up turn (a request without tools).
    expect(server.requests.some((q) => q.aborted)).toBe(false);
    expect(server.requests.every((q) => q.body.tools)).toBe(true);
    expect(server.requests.some((q) => firstUser(q).startsWith("second"))).toBe(false);
    let shown = JSON.parse((await runAtomic(["show", runId, "--json"], { home, env })).stdout);
    expect(shown.run.status).toBe("blocked");
    expect(shown.run.error.code).toBe("budget_exceeded");
    expect(shown.steps.map((x: { name: string; status: string }) => [x.name, x.status])).toEqual([["first", "completed"]]);
    expect(shown.totals.usage.costMicroUsd).toBe(billed);

    // Resuming without a higher budget stays blocked at once; with one it completes.
    const again = await runAtomic(["resume", runId, "--workers", "1"], { home, env });
    expect(again.code).toBe(3);
    const done = await runAtomic(["resume", runId, "--workers", "1", "--max-cost", "1", "--json"], { home, env });
    expect(done.code).toBe(0);
    expect(JSON.parse(done.stdout.trim().split("\n").at(-1)!).outputs).toEqual({ first: billed === 2500 ? "first done" : "listing", second: "second done" });
    shown = JSON.parse((await runAtomic(["show", runId, "--json"], { home, env })).stdout);
    const perStage = shown.steps.map((x: { usage: { costMicroUsd: number } }) => x.usage.costMicroUsd);
    expect(perStage).toEqual([billed, 1000]);
    expect(shown.totals.usage.costMicroUsd).toBe(server.billed.costMicroUsd);
    const firstIn = billed === 2500 ? 100 + 50 : 100;
    expect(shown.totals.usage.inputTokens).toBe(firstIn + 80);
  } finally {
    await server.close();
  }
});

e2eTest("admission: with 2 agent sessions per run, 6 parallel agent stages never have more than 2 live", async () => {
  const release: (() => void)[] = [];
  const server = await startFakeOpenAI(() => ({ text: "ok", usage: { prompt: 1, completion: 1 }, hold: new Promise<void>((r) => release.push(r)) }));
  // Let held requests go one by one, only once the run had every chance to start more.
  const pump = setInterval(() => release.shift()?.(), 100);
  try {
    const home = makeTempDir("atomic-admission-home-");
    const project = makeTempDir("atomic-admission-cwd-");
    mkdirSync(join(project, ".atomic"));
    writeFileSync(join(project, ".atomic", "config.json"), JSON.stringify({ admission: { maxSessionsPerRun: 2, slotsDir: join(home, "slots"), maxLoadPerCpu: 1e9, minFreeMemoryMb: 0 } }));
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const r = await runAtomic(["run", join(FIX, "parallel-agents.ts"), "--workers", "4", "--json"], { home, env, cwd: project });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs.texts).toEqual(["ok", "ok", "ok", "ok", "ok", "ok"]);
    expect(server.requests.length).toBe(6);
    expect(server.maxConcurrent).toBe(2);
    // The stages that waited said why (recorded, shown live with --json).
    const waits = r.stdout.split("\n").filter((l) => l.includes('"step_waiting"'));
    expect(waits.length).toBeGreaterThan(0);
    expect(waits[0]).toContain("2 of 2 allowed for this run are busy");
  } finally {
    clearInterval(pump);
    for (const f of release) f();
    await server.close();
  }
});

e2eTest("--max-duration: a running agent stage's call is aborted, it gets its wrap-up turn and, still busy a grace later, is cancelled; blocked with exit 3", async () => {
  const never = new Promise<unknown>(() => {});
  // Every request is held: the first until the time budget aborts it, the wrap-up turn for good.
  const server = await startFakeOpenAI((): Reply => ({ text: "never sent", hold: never }));
  try {
    const home = makeTempDir("atomic-duration-home-");
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const r = await runAtomic(["run", join(FIX, "two-agents.ts"), "--workers", "1", "--max-duration", "2s"], { home, env });
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/run (\S+) blocked: run \S+: the time budget of 2\.0 s is used up/);
    // The wrap-up turn was asked (a request without tools), then the stage was cancelled; "second" never started.
    const wrap = server.requests.find((q) => !q.body.tools);
    expect(wrap?.body.messages.at(-1)!.content).toContain("budget is used up");
    expect(server.requests[0]!.aborted).toBe(true);
    expect(server.requests.some((q) => firstUser(q).startsWith("second"))).toBe(false);
    const runId = /run (\S+) blocked/.exec(r.stderr)![1]!;
    const shown = JSON.parse((await runAtomic(["show", runId, "--json"], { home, env })).stdout);
    expect(shown.run.error.code).toBe("budget_exceeded");
  } finally {
    await server.close();
  }
});
