/**
 * Run totals for the status page and `runs --watch`: stage counts by state,
 * attempts, and usage summed over a run and all its child runs. Costs are
 * integer micro-dollars, so sums are exact.
 */

import type { RunReport, StepReport } from "../engine/run-report.ts";
import type { Usage } from "../sdk/types.ts";

export interface StageCounts {
  total: number;
  completed: number;
  failed: number;
  /** Stages waiting for a free worker of the pool (not counted in running). */
  queued: number;
  running: number;
  stopped: number;
}

/** The summable fields of Usage. */
export type UsageTotals = Pick<Usage, "inputTokens" | "outputTokens" | "cacheReadTokens" | "cacheWriteTokens" | "costMicroUsd" | "turns">;

export interface RunTotals {
  stages: StageCounts;
  /** Tool steps, sleeps and child workflows (not stages). */
  otherSteps: number;
  childRuns: number;
  /** Stage attempts, retries included. */
  attempts: number;
  /** Present once any stage reported usage. */
  usage: UsageTotals | null;
}

/**
 * Stage counts in words, as the run lists say them ("3 done, 1 failed, 2
 * running, 6 queued"): done always, the others when there are any. The page
 * says the same (countsText in page/views.js).
 */
export function stageCountsText(c: StageCounts): string {
  const parts = [`${c.completed} done`];
  if (c.failed) parts.push(`${c.failed} failed`);
  if (c.running) parts.push(`${c.running} running`);
  if (c.queued) parts.push(`${c.queued} queued`);
  if (c.stopped) parts.push(`${c.stopped} stopped`);
  return parts.join(", ");
}

export function emptyTotals(): RunTotals {
  return { stages: { total: 0, completed: 0, failed: 0, queued: 0, running: 0, stopped: 0 }, otherSteps: 0, childRuns: 0, attempts: 0, usage: null };
}

export function reportTotals(report: RunReport, into: RunTotals = emptyTotals()): RunTotals {
  for (const step of report.steps) addStep(step, into);
  return into;
}

function addStep(step: StepReport, t: RunTotals): void {
  if (step.kind === "stage") {
    t.stages.total++;
    // Only sleeps wait (StepState "waiting"); a stage never does.
    t.stages[step.status === "waiting" ? "running" : step.status]++;
    t.attempts += Math.max(1, step.attempts);
    if (step.usage) addUsage(t, step.usage);
  } else {
    t.otherSteps++;
  }
  if (step.child) {
    t.childRuns++;
    reportTotals(step.child, t);
  }
}

function addUsage(t: RunTotals, u: Usage): void {
  const sum = (t.usage ??= { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, costMicroUsd: 0, turns: 0 });
  sum.inputTokens += u.inputTokens || 0;
  sum.outputTokens += u.outputTokens || 0;
  sum.cacheReadTokens += u.cacheReadTokens || 0;
  sum.cacheWriteTokens += u.cacheWriteTokens || 0;
  sum.costMicroUsd += Math.round(u.costMicroUsd || 0);
  sum.turns += u.turns || 0;
}
