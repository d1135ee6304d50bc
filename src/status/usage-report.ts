/**
 * Token and cost analytics over many runs (`atomic usage`): every stage
 * attempt's usage, from the same three records `atomic show` adds up (a
 * stage's checkpoint result, a failed attempt's `step_failed`, a cancelled
 * attempt's `usage_recorded`), grouped by the root run's workflow, the
 * stage, the model, the runner or the day the usage was recorded (UTC).
 * A root run's figures include its child runs', as `show` totals them, so
 * the groups sum to the sum of `show` over the same runs, to the token
 * and the micro-dollar.
 */

import { EVENT, type StepStartedPayload } from "../engine/journal-events.ts";
import type { Journal } from "../journal/journal.ts";
import type { StageUsage } from "../journal/stage-index.ts";
import type { RunId } from "../shared/ids.ts";
import type { StageResult, Usage } from "../sdk/types.ts";

export const USAGE_GROUPINGS = ["workflow", "stage", "model", "runner", "day"] as const;
export type UsageGrouping = (typeof USAGE_GROUPINGS)[number];

/** The summable fields, as the stage index keeps them per stage. */
export type UsageSums = StageUsage;

export interface UsageGroup extends UsageSums {
  key: string;
  /** Root runs with usage in this group. */
  runs: number;
}

export interface UsageReport {
  by: UsageGrouping;
  since: number | null;
  /** Root runs looked at (with usage or not). */
  runs: number;
  groups: UsageGroup[];
  total: UsageSums;
  /** The costliest root runs, most first (at most 5). */
  topRuns: { runId: RunId; workflow: string; costMicroUsd: number }[];
}

function zero(): UsageSums {
  return { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, costMicroUsd: 0, turns: 0 };
}

function add(into: UsageSums, u: Partial<Usage>): void {
  into.inputTokens += u.inputTokens ?? 0;
  into.outputTokens += u.outputTokens ?? 0;
  into.cacheReadTokens += u.cacheReadTokens ?? 0;
  into.cacheWriteTokens += u.cacheWriteTokens ?? 0;
  into.costMicroUsd += u.costMicroUsd ?? 0;
  into.turns += u.turns ?? 0;
}

export async function usageReport(journal: Journal, opts: { by: UsageGrouping; since?: number; workflow?: string }): Promise<UsageReport> {
  const roots = await journal.listRuns({ ...(opts.since !== undefined ? { createdSince: opts.since } : {}), ...(opts.workflow !== undefined ? { workflowName: opts.workflow } : {}) });
  const groups = new Map<string, UsageGroup & { roots: Set<RunId> }>();
  const total = zero();
  const perRun: UsageReport["topRuns"] = [];
  for (const root of roots) {
    const spent = zero();
    for (const runId of await treeOf(journal, root.id)) {
      await foldRun(journal, runId, (stage, runner, at, u) => {
        const key = keyOf(opts.by, { workflow: root.workflowName, stage, model: u.model ?? "unknown", runner, day: new Date(at).toISOString().slice(0, 10) });
        let g = groups.get(key);
        if (!g) groups.set(key, (g = { key, runs: 0, roots: new Set(), ...zero() }));
        add(g, u);
        g.roots.add(root.id);
        add(total, u);
        add(spent, u);
      });
    }
    if (spent.costMicroUsd > 0) perRun.push({ runId: root.id, workflow: root.workflowName, costMicroUsd: spent.costMicroUsd });
  }
  const list = [...groups.values()].map(({ roots: r, ...g }) => ({ ...g, runs: r.size }));
  list.sort((a, b) => (opts.by === "day" ? a.key.localeCompare(b.key) : b.costMicroUsd - a.costMicroUsd || a.key.localeCompare(b.key)));
  perRun.sort((a, b) => b.costMicroUsd - a.costMicroUsd);
  return { by: opts.by, since: opts.since ?? null, runs: roots.length, groups: list, total, topRuns: perRun.slice(0, 5) };
}

function keyOf(by: UsageGrouping, dims: Record<UsageGrouping, string>): string {
  return dims[by];
}

/** A root run and all its descendants. */
async function treeOf(journal: Journal, rootId: RunId): Promise<RunId[]> {
  const out: RunId[] = [rootId];
  for (let i = 0; i < out.length; i++) {
    for (const child of await journal.listRuns({ parentId: out[i]!, rootsOnly: false })) out.push(child.id);
  }
  return out;
}

/** Each attempt's usage of one run, with its stage name, runner and when it was recorded. */
async function foldRun(journal: Journal, runId: RunId, onUsage: (stage: string, runner: string, at: number, usage: Usage) => void): Promise<void> {
  const started = new Map<string, { name: string; runner?: string }>();
  for (const e of await journal.readEvents(runId)) {
    if (e.type === EVENT.usageRecorded) {
      const u = e.payload as { stageKey: string; name?: string; usage: Usage };
      const s = started.get(u.stageKey);
      onUsage(u.name ?? s?.name ?? u.stageKey, s?.runner ?? "unknown", e.at, u.usage);
      continue;
    }
    if (e.key === null) continue;
    const p = e.payload as (StepStartedPayload & { result?: StageResult; usage?: Usage }) | null;
    if (p?.kind !== "stage") continue;
    if (e.type === EVENT.stepStarted) started.set(e.key, { name: p.name, ...(p.runner ? { runner: p.runner } : {}) });
    else if (e.type === EVENT.stepFailed && p.usage) onUsage(p.name, started.get(e.key)?.runner ?? "unknown", e.at, p.usage);
    else if (e.type === EVENT.checkpoint && p.result?.usage) onUsage(p.name, started.get(e.key)?.runner ?? p.result.runner ?? "unknown", e.at, p.result.usage);
  }
}
