/**
 * A budget counts a whole chain of runs (ctx.continueAsNew, issue 26),
 * through the real binary against the fake OpenAI-compatible server: each
 * run of test/budget/fixtures/chain-agents.ts spends $0.001 on one stage.
 * - `--max-cost 0.0025`: the fourth run starts with $0.003 spent by the
 *   three before it, so its stage never starts and it ends blocked (exit
 *   3); a resume of the chain with a higher cap completes it.
 * - The chain's spending survives crashes: killed with SIGKILL after the
 *   second run's stage, resumed without a cap (which counts no spending)
 *   and killed again after the third run's stage, then resumed with
 *   `--max-cost 0.003`: the fourth run is blocked, as the chain spent it.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { startFakeOpenAI, text } from "../helpers/fake-openai.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const FLOW = join(import.meta.dir, "fixtures", "chain-agents.ts");

async function chain(home: string, env: Record<string, string>): Promise<{ id: string; status: string }[]> {
  const r = await runAtomic(["--json", "runs", "--workflow", "chain-agents"], { home, env });
  return r.stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; status: string }).reverse();
}

e2eTest("--max-cost counts every run of a chain: the run that starts with the chain's cap spent is blocked; resume --max-cost completes the chain", async () => {
  const server = await startFakeOpenAI(() => text("done", { prompt: 10, completion: 1, cost: 0.001 }));
  try {
    const home = makeTempDir("atomic-budget-chain-");
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const r = await runAtomic(["run", FLOW, "--input", "left=5", "--workers", "1", "--max-cost", "0.0025"], { home, env });
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/blocked: run \S+: the cost budget of \$0\.0025 is used up \(\$0\.003 spent\); no new stage starts/);
    expect(server.requests.length).toBe(3);
    let runs = await chain(home, env);
    expect(runs.map((x) => x.status)).toEqual(["continued", "continued", "continued", "blocked"]);

    // Without a higher cap the chain stays blocked; with one it completes.
    expect((await runAtomic(["resume", runs[0]!.id, "--workers", "1"], { home, env })).code).toBe(3);
    expect(server.requests.length).toBe(3);
    const done = await runAtomic(["--json", "resume", runs[0]!.id, "--workers", "1", "--max-cost", "1"], { home, env });
    expect(done.code).toBe(0);
    expect(JSON.parse(done.stdout.trim().split("\n").at(-1)!).outputs).toEqual({ last: "done" });
    expect(server.requests.length).toBe(5);
    runs = await chain(home, env);
    expect(runs.map((x) => x.status)).toEqual(["continued", "continued", "continued", "continued", "completed"]);
  } finally {
    await server.close();
  }
});

e2eTest("the chain's spending survives kills: resumed without a cap in between, a later --max-cost still counts every run", async () => {
  const server = await startFakeOpenAI(() => text("done", { prompt: 10, completion: 1, cost: 0.001 }));
  try {
    const home = makeTempDir("atomic-budget-chain-");
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const killed = await runAtomic(["run", FLOW, "--input", "left=4", "--workers", "1"], { home, env: { ...env, ATOMIC_FAULT_POINTS: "after-checkpoint:2" } });
    expect(killed.stderr).toContain("[fault] after-checkpoint #2: SIGKILL");
    const first = (await chain(home, env))[0]!.id;
    const again = await runAtomic(["resume", first, "--workers", "1"], { home, env: { ...env, ATOMIC_FAULT_POINTS: "after-checkpoint:1" } });
    expect(again.stderr).toContain("[fault] after-checkpoint #1: SIGKILL");
    expect(server.requests.length).toBe(3);
    expect((await chain(home, env)).length).toBe(3);
    const capped = await runAtomic(["resume", first, "--workers", "1", "--max-cost", "0.003"], { home, env });
    expect(capped.code).toBe(3);
    expect(capped.stderr).toMatch(/the cost budget of \$0\.003 is used up \(\$0\.003 spent\)/);
    expect(server.requests.length).toBe(3);
    expect((await chain(home, env)).map((x) => x.status)).toEqual(["continued", "continued", "continued", "blocked"]);
  } finally {
    await server.close();
  }
});
