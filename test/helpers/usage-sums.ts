/**
 * A run's usage as every view shows it, checked against what the fake
 * provider answered: each named stage's usage in `atomic show --json`, the
 * run's total there, its row of `atomic runs --json` and `atomic usage
 * --json` (what GET /api/usage answers, the cost page's source), to the
 * token and the micro-dollar.
 */

import { expect } from "bun:test";
import { runAtomic } from "./atomic.ts";

export const LEDGER_KEYS = ["inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "costMicroUsd"] as const;
export type Ledger = Record<(typeof LEDGER_KEYS)[number], number>;

const pick = (u: Record<string, number> | null | undefined): Ledger => Object.fromEntries(LEDGER_KEYS.map((k) => [k, u?.[k] ?? 0])) as Ledger;
export const times = (u: Ledger, n: number): Ledger => Object.fromEntries(LEDGER_KEYS.map((k) => [k, u[k] * n])) as Ledger;

/** Every stage in `stages` used `each` (one model call each); the run's sums in show, runs and usage are their total. `env`: the commands' (a journal named by ATOMIC_JOURNAL). */
export async function expectRunUsage(home: string, runId: string, stages: readonly string[], each: Ledger, env?: Record<string, string>): Promise<void> {
  const shown = JSON.parse((await runAtomic(["show", runId, "--json"], { home, env })).stdout) as { steps: { name: string; usage?: Record<string, number> }[]; totals: { usage: Record<string, number> } };
  const byStage = Object.fromEntries(shown.steps.filter((s) => stages.includes(s.name)).map((s) => [s.name, pick(s.usage)]));
  expect(byStage).toEqual(Object.fromEntries(stages.map((name) => [name, each])));
  const total = times(each, stages.length);
  expect(pick(shown.totals.usage)).toEqual(total);
  const rows = (await runAtomic(["runs", "--json"], { home, env })).stdout.trim().split("\n");
  const listed = rows.map((l) => JSON.parse(l) as { id: string; usage: Record<string, number> | null }).find((r) => r.id === runId);
  expect(pick(listed?.usage)).toEqual(total);
  const report = JSON.parse((await runAtomic(["usage", "--json"], { home, env })).stdout) as { total: Record<string, number> };
  expect(pick(report.total)).toEqual(total);
}

/**
 * Caps one token and one micro-dollar above `total`: a run that spends exactly that never reaches them; one whose stages are charged more is stopped before its last stage by
 * the budget's own count.
 */
export function capsAbove(total: Ledger): string[] {
  const tokens = total.inputTokens + total.outputTokens + total.cacheReadTokens + total.cacheWriteTokens;
  return ["--max-tokens", String(tokens + 1), "--max-cost", ((total.costMicroUsd + 1) / 1_000_000).toFixed(6)];
}
