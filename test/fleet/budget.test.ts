/**
 * Cost caps with stages on worker hosts (`atomic worker`, the real binary)
 * and a root without workers of its own (`--workers 0`), on a shared
 * Postgres journal, against the fake OpenAI-compatible server (each stage
 * one call at a fixed price):
 * - the trial's case on one host with one slot: six $0.50 stages at
 *   concurrency 2, `--max-cost 1.2`: exactly the three stages that reached
 *   the cap ran. A host claims nothing more of a root after committing a
 *   budgeted result until the root counted it (the claim hold of that
 *   result, docs/guides/durability.md), and the queued stages are taken
 *   off the queue once the budget is used up;
 * - a fan-out of 40 $0.10 stages at concurrency 8 on two hosts of two
 *   slots, `--max-cost 1`: what ran is the stages that reached the cap and
 *   at most one more per other slot (those running then, which finish:
 *   a "cancel if queued" does not stop a stage a host runs).
 * In both, the warning comes at its fraction, before the cap, and the
 * blocking message, `show`, the stream and what the fake server billed
 * agree on the amount: a stage wrapped up when the cap was reached lets
 * its call in flight finish and records it (no call is aborted, none is
 * made after).
 */

import { afterAll, afterEach, beforeAll, expect } from "bun:test";
import { join } from "node:path";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { startFakeOpenAI } from "../helpers/fake-openai.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { concurrentTest, whenIdle } from "../helpers/concurrent.ts";
import { startHost, stopHosts } from "./support.ts";
import { type BudgetEvent, walkBudget } from "../helpers/budget-stream.ts";

const FANOUT = join(import.meta.dir, "..", "budget", "fixtures", "budget-fanout.ts");

beforeAll(async () => {
  await testPostgres();
});
afterEach(
  whenIdle(async () => {
    await stopHosts();
    await killSpawned();
    removeTempDirs();
  }),
);
afterAll(() => removeTempDirs());


async function cappedOnHosts(o: { stages: number; concurrency: number; hosts: number; slots: number; priceUsd: number; capUsd: number }) {
  const server = await startFakeOpenAI(() => ({ text: "ok", usage: { prompt: 10, completion: 1, cost: o.priceUsd }, hold: Bun.sleep(50) }));
  try {
    const url = await freshDatabase("fbudget");
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    for (let i = 0; i < o.hosts; i++) await startHost({ url, id: `b${i}`, slots: o.slots, env });
    const home = makeTempDir("atomic-fleet-budget-");
    const args = ["run", FANOUT, "--journal", url, "--workers", "0", "--input", `n=${o.stages}`, "--input", `concurrency=${o.concurrency}`];
    const r = await runAtomic([...args, "--max-cost", String(o.capUsd), "--json"], { home, env });
    expect(r.code).toBe(3);
    const events = r.stdout.trim().split("\n").map((l) => JSON.parse(l) as BudgetEvent);
    const cap = Math.round(o.capUsd * 1_000_000);
    const price = Math.round(o.priceUsd * 1_000_000);
    // Walk the stream: spending is what ended stages recorded; the cap is reached at the step_ended that got it there.
    const { spent, capAt, warnAt } = walkBudget(events, cap);
    // The warning came at its fraction (80 %), before the cap.
    expect(capAt).toBeGreaterThan(-1);
    expect(warnAt).toBeGreaterThan(-1);
    expect(warnAt).toBeLessThan(capAt);
    const reaching = Math.ceil(cap / price);
    // Each stage's prompt names it: how many stages called the model (a wrap-up turn is a second call of the same stage).
    const stagesRan = new Set(server.requests.map((q) => q.body.messages.find((m) => m.role === "user")!.content)).size;
    const slots = o.hosts * o.slots;
    expect(stagesRan).toBeGreaterThanOrEqual(reaching);
    expect(stagesRan).toBeLessThanOrEqual(reaching + Math.min(slots, o.concurrency) - 1);
    expect(spent).toBeGreaterThanOrEqual(cap);
    // One call per stage: the stages running at the cap finished their call, none was aborted or wrapped up with another.
    expect(server.requests.length).toBe(stagesRan);
    expect(server.requests.some((q) => q.aborted)).toBe(false);
    expect(spent).toBe(stagesRan * price);
    // What the fake server billed is what the run recorded.
    expect(server.billed.costMicroUsd).toBe(spent);

    const result = events.find((e) => e.type === "result")!;
    expect(result.status).toBe("blocked");
    const said = /\(\$([\d.]+) spent\)/.exec(result.error!.message)![1]!;
    expect(Math.round(Number(said) * 1_000_000)).toBe(spent);
    const shown = JSON.parse((await runAtomic(["show", result.runId!, "--journal", url, "--json"], { home, env })).stdout);
    expect(shown.totals.usage.costMicroUsd).toBe(spent);
    expect(shown.run.error.message).toBe(result.error!.message);
    return { stagesRan, reaching };
  } finally {
    await server.close();
  }
}

concurrentTest("fleet budget > the trial's case on one host with one slot: six $0.50 stages, concurrency 2, --max-cost 1.2: exactly three ran", async () => {
  const { stagesRan } = await cappedOnHosts({ stages: 6, concurrency: 2, hosts: 1, slots: 1, priceUsd: 0.5, capUsd: 1.2 });
  expect(stagesRan).toBe(3);
}, 120_000);

concurrentTest("fleet budget > a fan-out of 40 at concurrency 8 on two hosts of two slots, --max-cost 1: overshoot only by the stages running at the cap", async () => {
  await cappedOnHosts({ stages: 40, concurrency: 8, hosts: 2, slots: 2, priceUsd: 0.1, capUsd: 1 });
}, 120_000);
