/**
 * `atomic usage` through the real binary: after two mixed runs (a shell
 * stage, a paid failed attempt, its retry, a child run's stage), its
 * totals equal the sum of `atomic show` over the same runs, to the
 * token and the micro-dollar, whatever the grouping; a bad --by is one
 * sentence and a hint (exit 2).
 */

import { afterAll, afterEach, expect } from "bun:test";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, makeTempDir } from "../e2e/support.ts";
import { inOrder, startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const MIXED = join(import.meta.dir, "fixtures", "mixed.ts");
const KEYS = ["inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "costMicroUsd", "turns"] as const;

e2eTest("atomic usage equals the sum of atomic show over the same runs, by workflow, stage, model, runner and day", async () => {
  const home = makeTempDir();
  const ids: string[] = [];
  for (const cost of [0.000123, 0.000321]) {
    const fake = await startFakeOpenAI(
      inOrder(
        toolCall("list", {}, { usage: { prompt: 100, completion: 10, cached: 40, cost } }),
        { status: 401, body: '{"error":{"message":"bad key"}}' },
        text("retried", { prompt: 200, completion: 20, cost: 0.000456 }),
        text("from the child", { prompt: 7, completion: 3, cost: 0.000018 }),
      ),
    );
    try {
      const r = await runAtomic(["run", MIXED, "--json"], { home, env: { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" } });
      expect(r.code).toBe(0);
      ids.push(JSON.parse(r.stdout.trim().split("\n").at(-1)!).runId);
    } finally {
      await fake.close();
    }
  }
  const expected = Object.fromEntries(KEYS.map((k) => [k, 0])) as Record<(typeof KEYS)[number], number>;
  for (const id of ids) {
    const shown = JSON.parse((await runAtomic(["show", id, "--json"], { home })).stdout);
    for (const k of KEYS) expected[k] += shown.totals.usage[k];
  }
  expect(expected.costMicroUsd).toBe(123 + 321 + 2 * (456 + 18));

  for (const by of ["workflow", "stage", "model", "runner", "day"]) {
    const r = await runAtomic(["usage", "--by", by, "--json"], { home });
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.runs).toBe(2);
    expect(report.total).toEqual(expected);
    for (const k of KEYS) expect(report.groups.reduce((n: number, g: Record<string, number>) => n + g[k]!, 0)).toBe(expected[k]);
    if (by === "workflow") expect(report.groups.map((g: { key: string; runs: number }) => [g.key, g.runs])).toEqual([["mixed", 2]]);
    if (by === "stage") expect(report.groups.map((g: { key: string }) => g.key).sort()).toEqual(["flaky", "inner"]);
    if (by === "runner") expect(report.groups.map((g: { key: string }) => g.key)).toEqual(["openai"]);
  }
  const plain = await runAtomic(["usage"], { home });
  expect(plain.code).toBe(0);
  expect(plain.stdout).toMatch(/^total\s+2\s/m);
  expect(plain.stdout).toContain(`$${(expected.costMicroUsd / 1_000_000).toFixed(6).replace(/0+$/, "")}`);
  expect(plain.stdout).toContain("costliest runs:");

  const bad = await runAtomic(["usage", "--by", "week"], { home });
  expect(bad.code).toBe(2);
  expect(expectOneSentenceError(bad.stderr).message).toContain('--by "week" is not a grouping');
});
