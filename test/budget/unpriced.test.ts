/**
 * An unpriced model (issue 13 item 18): tokens spent at no known price (no
 * cost reported by the provider, no price in the config) show as
 * "unpriced", not "$0.0000", in `show`, `runs` and the live view; a priced
 * one shows its cost; `--max-cost` on a workflow whose runner and model
 * are unpriced warns at start. Through dist/atomic against the fake
 * OpenAI-compatible server.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { startFakeOpenAI, text } from "../helpers/fake-openai.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const WF = join(import.meta.dir, "fixtures", "unpriced.ts");

e2eTest("an unpriced model shows 'unpriced' in show, runs and the live view; --max-cost warns at start", async () => {
  const server = await startFakeOpenAI(() => text("hello", { prompt: 100, completion: 10 }));
  try {
    const home = makeTempDir("atomic-unpriced-");
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const r = await runAtomic(["run", WF, "--max-cost", "1"], { home, env });
    expect(r.code).toBe(0);
    expect(r.stderr).toContain('warning: model "fake-model" has no price (add it under "pricing" in the config), so unless the provider reports a cost, its tokens count as $0 against --max-cost');
    expect(r.stdout).toMatch(/stage ask completed .*\(110 tokens, unpriced\)/);
    expect(r.stdout).not.toContain("$0");
    const id = /started run (\S+)/.exec(r.stdout)![1]!;
    const show = await runAtomic(["show", id], { home, env });
    expect(show.stdout).toMatch(/total\s+100 in, 10 out, .*unpriced/);
    expect(show.stdout).not.toContain("$0");
    const runs = await runAtomic(["runs"], { home, env });
    expect(runs.stdout).toMatch(new RegExp(`${id} .*unpriced`));
    expect(runs.stdout).not.toContain("$0");
  } finally {
    await server.close();
  }
});

e2eTest("a model whose provider reports its cost shows that cost in the live view and runs", async () => {
  const server = await startFakeOpenAI(() => text("hello", { prompt: 100, completion: 10, cost: 0.0123 }));
  try {
    const home = makeTempDir("atomic-unpriced-");
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const r = await runAtomic(["run", WF], { home, env });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/\(110 tokens, \$0\.0123\)/);
    const id = /started run (\S+)/.exec(r.stdout)![1]!;
    expect((await runAtomic(["runs"], { home, env })).stdout).toMatch(new RegExp(`${id} .*\\$0\\.0123`));
  } finally {
    await server.close();
  }
});
