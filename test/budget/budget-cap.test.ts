/**
 * A cost cap that holds, through the real binary with stages on pool
 * workers, against the fake OpenAI-compatible server (each stage one call
 * at a fixed price):
 * - the trial's case: six $0.50 stages, concurrency 2, one worker,
 *   `--max-cost 1.2`;
 * - a fan-out of 50 $0.10 stages at concurrency 10 on 4 workers,
 *   `--max-cost 1`.
 * What ran is the stages that reached the cap and at most one more per
 * other worker (the stages running when it was reached, whose call in
 * flight finishes and is counted; none is aborted and no call follows):
 * no queued stage starts after it, so with one worker exactly the stages
 * that reached it ran. The warning comes at its fraction, before the cap
 * (the run's own event stream, --json); the blocking message, `show`, the
 * stream and what the fake server billed agree on the amount
 * (docs/design/budgets.md). Nothing here asserts a duration.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { startFakeOpenAI } from "../helpers/fake-openai.ts";
import { type BudgetEvent, walkBudget } from "../helpers/budget-stream.ts";

const FIX = join(import.meta.dir, "fixtures");
afterEach(cleanupWhenIdle);
afterAll(cleanupNow);


async function capped(opts: { stages: number; concurrency: number; workers: number; priceUsd: number; capUsd: number }) {
  const server = await startFakeOpenAI(() => ({ text: "ok", usage: { prompt: 10, completion: 1, cost: opts.priceUsd }, hold: Bun.sleep(50) }));
  try {
    const home = makeTempDir("atomic-budget-cap-");
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const args = ["run", join(FIX, "budget-fanout.ts"), "--input", `n=${opts.stages}`, "--input", `concurrency=${opts.concurrency}`];
    const r = await runAtomic([...args, "--workers", String(opts.workers), "--max-cost", String(opts.capUsd), "--json"], { home, env });
    expect(r.code).toBe(3);
    const events = r.stdout.trim().split("\n").map((l) => JSON.parse(l) as BudgetEvent);
    const cap = Math.round(opts.capUsd * 1_000_000);

    // Walk the stream: spending is what ended stages recorded; the cap is reached at the step_ended that got it there.
    const { spent, capAt, warnAt } = walkBudget(events, cap);
    expect(capAt).toBeGreaterThan(-1);
    // The warning came at its fraction (80 %), before the cap.
    expect(warnAt).toBeGreaterThan(-1);
    expect(warnAt).toBeLessThan(capAt);
    // What ran: the stages that reached the cap, and at most the others running at that moment (one per other
    // worker), whose call finished; no queued stage started after it. With one worker: exactly the stages
    // that reached it.
    const price = Math.round(opts.priceUsd * 1_000_000);
    const reaching = Math.ceil(cap / price);
    const stagesRan = new Set(server.requests.map((q) => q.body.messages.find((m) => m.role === "user")!.content)).size;
    expect(stagesRan).toBeGreaterThanOrEqual(reaching);
    expect(stagesRan).toBeLessThanOrEqual(reaching + Math.min(opts.workers, opts.concurrency) - 1);
    // In money: one call per stage that ran (none aborted, none after the wrap-up), and what the fake billed.
    expect(spent).toBeGreaterThanOrEqual(cap);
    expect(server.requests.length).toBe(stagesRan);
    expect(server.requests.some((q) => q.aborted)).toBe(false);
    expect(spent).toBe(stagesRan * price);
    expect(server.billed.costMicroUsd).toBe(spent);

    // The blocking message, `show` and the stream agree on the amount.
    const result = events.find((e) => e.type === "result")!;
    expect(result.status).toBe("blocked");
    const said = /\(\$([\d.]+) spent\)/.exec(result.error!.message)![1]!;
    expect(Math.round(Number(said) * 1_000_000)).toBe(spent);
    const shown = JSON.parse((await runAtomic(["show", (result as { runId?: string }).runId!, "--json"], { home, env })).stdout);
    expect(shown.totals.usage.costMicroUsd).toBe(spent);
    expect(shown.run.error.message).toBe(result.error!.message);
  } finally {
    await server.close();
  }
}

e2eTest("the trial's case: six $0.50 stages, concurrency 2, one worker, --max-cost 1.2: nothing starts after the cap, message and show agree", async () => {
  await capped({ stages: 6, concurrency: 2, workers: 1, priceUsd: 0.5, capUsd: 1.2 });
});

e2eTest("a fan-out of 50 at concurrency 10 on 4 workers, --max-cost 1: overshoot only by the stages running at the cap", async () => {
  await capped({ stages: 50, concurrency: 10, workers: 4, priceUsd: 0.1, capUsd: 1 });
});
