/**
 * One line per root run, as the status page's run list and `atomic runs
 * --watch` show it: shown status, workflow, start, duration, stages done of
 * total, cost when known.
 *
 * Stage counts and usage come from the journal's stage index (one grouped
 * read for a whole page of runs: JournalViews.stageTallies), never from a
 * replay of the runs' events, so a list costs the same however long the
 * runs' histories are. A stage's state there is its last record's: queued
 * (an attempt waits for a free worker of the pool), running (an attempt
 * started), failed (its last attempt failed), finished (with its outcome).
 * As in a run's report, a queued or running stage is shown "stopped"
 * when nobody drives its run any more: the run it belongs to has ended, or
 * the root is not live (crashed, or stopped waiting).
 */

import { shortVersion } from "../engine/pinned-code.ts";
import { leaseExpiry, shownEnd, shownStatus } from "../journal/run-status.ts";
import type { Journal, ListRunsFilter } from "../journal/journal.ts";
import type { Lease, RunRecord, RunStatus, ShownStatus } from "../journal/runs.ts";
import type { StageTally } from "../journal/views.ts";
import type { RunOriginFilter } from "../journal/run-origin.ts";
import { runOrigins } from "./run-origins.ts";
import type { StageCounts, UsageTotals } from "./totals.ts";

export interface RunSummary {
  id: string;
  workflow: string;
  /** The code version the run is pinned to, short (engine/pinned-code.ts); "" for a child run (its root's). */
  code: string;
  status: ShownStatus;
  storedStatus: RunStatus;
  createdAt: number;
  updatedAt: number;
  endedAt: number | null;
  durationMs: number;
  stages: StageCounts;
  usage: UsageTotals | null;
  error: { code: string; message: string } | null;
  /** Pending control request ("pause", "cancel") not yet acknowledged. */
  control: string | null;
  /** For a crashed run: when its lease expired (or would have). */
  leaseExpiresAt?: number;
  /** The run's tags (journal/tags.ts), when it has any (the run list only). */
  tags?: Record<string, string>;
  /** How the run was started and whether the service recovered it (./run-origins.ts; the run list only). */
  origins?: RunOriginFilter[];
  /** How many times the local service serving this list resumed the run since it started (`atomic serve`). */
  recovered?: number;
}

export interface RunListQuery {
  status?: RunStatus | undefined;
  /** Runs of this origin (journal/run-origin.ts). */
  origin?: RunOriginFilter | undefined;
  /** Runs with every one of these tags. */
  tags?: Readonly<Record<string, string>> | undefined;
  /** Runs of the workflow of this name. */
  workflow?: string | undefined;
  /** Runs whose id, workflow, inputs, outputs or error contain this text (journal/run-search.ts). */
  text?: string | undefined;
  /** Runs created at or after this time (ms since the epoch). */
  since?: number | undefined;
  /** Runs created before this time. */
  until?: number | undefined;
  limit: number;
  offset: number;
}

export interface RunListPage {
  runs: RunSummary[];
  total: number;
  limit: number;
  offset: number;
}

/** Stored statuses of runs nobody drives. */
const ENDED: ReadonlySet<string> = new Set(["completed", "failed", "cancelled", "interrupted", "blocked", "skipped"]);

export class RunSummaries {
  constructor(private readonly journal: Journal) {}

  async list(q: RunListQuery): Promise<RunListPage> {
    const filter: ListRunsFilter = {
      ...(q.status ? { status: q.status } : {}),
      ...(q.tags && Object.keys(q.tags).length > 0 ? { tags: q.tags } : {}),
      ...(q.workflow ? { workflowName: q.workflow } : {}),
      ...(q.origin ? { origin: q.origin } : {}),
      ...(q.text?.trim() ? { text: q.text } : {}),
      ...(q.since !== undefined ? { createdSince: q.since } : {}),
      ...(q.until !== undefined ? { createdBefore: q.until } : {}),
    };
    const runs = await this.journal.listRuns({ ...filter, limit: q.limit, offset: q.offset });
    // A page that is not full ends the list: its end is the total, and the runs are not counted again (a search
    // for a rare text reads every run once, not twice: journal/run-search.ts).
    const ended = runs.length < q.limit && (runs.length > 0 || q.offset === 0);
    const total = ended ? q.offset + runs.length : await this.journal.countRuns(filter);
    const [tallies, tags] = await Promise.all([this.tallies(runs), this.journal.tags.of(runs.map((r) => r.id))]);
    const out: RunSummary[] = [];
    for (const run of runs) {
      const summary = await this.summarize(run, tallies.get(run.id) ?? []);
      const t = tags.get(run.id);
      if (t) summary.tags = t;
      summary.origins = runOrigins(run);
      out.push(summary);
    }
    return { runs: out, total, limit: q.limit, offset: q.offset };
  }

  /** The stage tallies of these root runs, by root. */
  private async tallies(runs: readonly RunRecord[]): Promise<Map<string, StageTally[]>> {
    const byRoot = new Map<string, StageTally[]>();
    if (runs.length === 0) return byRoot;
    for (const t of await this.journal.views.stageTallies(runs.map((r) => r.id))) {
      const list = byRoot.get(t.rootId);
      if (list) list.push(t);
      else byRoot.set(t.rootId, [t]);
    }
    return byRoot;
  }

  /** A root run's line; `tallies` read here when not given. */
  async summarize(run: RunRecord, tallies?: StageTally[], now = Date.now()): Promise<RunSummary> {
    const lease = ENDED.has(run.status) ? undefined : await this.journal.getLease(run.rootId);
    const status = shownStatus(run, lease, now);
    const counts = countStages(tallies ?? (await this.tallies([run])).get(run.id) ?? [], isDriven(status, lease, now));
    const end = shownEnd(run, status, lease, now);
    const summary: RunSummary = {
      id: run.id,
      workflow: run.workflowName,
      code: run.workflowDigest ? shortVersion(run.workflowDigest) : "",
      status,
      storedStatus: run.status,
      createdAt: run.createdAt,
      updatedAt: run.updatedAt,
      endedAt: run.endedAt,
      durationMs: Math.max(0, end - run.createdAt),
      stages: counts.stages,
      usage: counts.usage,
      error: run.error ? { code: run.error.code, message: run.error.message } : null,
      control: run.control,
    };
    const expiry = leaseExpiry(lease);
    if (status === "crashed" && expiry !== undefined) summary.leaseExpiresAt = expiry;
    return summary;
  }
}

/** Whether a root's running stages still run: the run is live, or paused or waiting with a live driver (as run-report.ts decides). */
function isDriven(status: ShownStatus, lease: Lease | undefined, now: number): boolean {
  if (status === "running") return true;
  return (status === "awaiting_input" || status === "paused") && lease !== undefined && lease.renewedAt + lease.timeoutMs >= now;
}

function countStages(tallies: readonly StageTally[], driven: boolean): { stages: StageCounts; usage: UsageTotals | null } {
  const stages: StageCounts = { total: 0, completed: 0, failed: 0, queued: 0, running: 0, stopped: 0 };
  let usage: UsageTotals | null = null;
  for (const t of tallies) {
    stages.total += t.stages;
    if (t.state === "finished") stages[t.outcome === "failed" ? "failed" : "completed"] += t.stages;
    else if (t.state === "failed") stages.failed += t.stages;
    // queued (waiting for a free worker) or running: what it is while its run is driven, else stopped.
    else stages[driven && !ENDED.has(t.runStatus) ? t.state : "stopped"] += t.stages;
    if (t.usage) {
      usage ??= { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, costMicroUsd: 0, turns: 0 };
      for (const k of Object.keys(usage) as (keyof UsageTotals)[]) usage[k] += t.usage[k];
    }
  }
  return { stages, usage };
}
