/**
 * One line per root run, as the status page's run list and `atomic runs
 * --watch` show it: shown status, workflow, start, duration, stages done of
 * total, cost when known.
 *
 * Stage counts come from the run's report (its events and its children's),
 * which is too much work to redo per request. They are cached per run:
 * - a run that is not running changes only when it is resumed, which moves
 *   its `lastSeq`: the cache entry is keyed by (lastSeq, stored status);
 * - a live run's children move without touching the root's row, so its
 *   entry is reused for at most `liveTtlMs`.
 * The cache is bounded (least recently used entries go first).
 */

import { buildRunReport } from "../engine/run-report.ts";
import { leaseExpiry, shownStatus } from "../journal/run-status.ts";
import type { Journal, RunRecord, RunStatus, ShownStatus } from "../journal/types.ts";
import { emptyTotals, reportTotals, type StageCounts, type UsageTotals } from "./totals.ts";

export interface RunSummary {
  id: string;
  workflow: string;
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
}

export interface RunListQuery {
  status?: RunStatus | undefined;
  limit: number;
  offset: number;
}

export interface RunListPage {
  runs: RunSummary[];
  total: number;
  limit: number;
  offset: number;
}

/** Stored statuses of runs nobody drives: their counts change only with their lastSeq. */
const ENDED: ReadonlySet<string> = new Set(["completed", "failed", "cancelled", "interrupted", "blocked"]);

interface CacheEntry {
  key: string;
  at: number;
  stages: StageCounts;
  usage: UsageTotals | null;
}

export class RunSummaries {
  private readonly cache = new Map<string, CacheEntry>();

  constructor(
    private readonly journal: Journal,
    private readonly opts: { liveTtlMs?: number; maxEntries?: number } = {},
  ) {}

  async list(q: RunListQuery): Promise<RunListPage> {
    const filter = q.status ? { status: q.status } : {};
    const [runs, total] = await Promise.all([
      this.journal.listRuns({ ...filter, limit: q.limit, offset: q.offset }),
      this.journal.countRuns(filter),
    ]);
    const out: RunSummary[] = [];
    for (const run of runs) out.push(await this.summarize(run));
    return { runs: out, total, limit: q.limit, offset: q.offset };
  }

  async summarize(run: RunRecord, now = Date.now()): Promise<RunSummary> {
    const lease = ENDED.has(run.status) ? undefined : await this.journal.getLease(run.rootId);
    const status = shownStatus(run, lease, now);
    const counts = await this.counts(run, now);
    const end = run.endedAt ?? (ENDED.has(run.status) || status === "crashed" ? run.updatedAt : now);
    const summary: RunSummary = {
      id: run.id,
      workflow: run.workflowName,
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

  private async counts(run: RunRecord, now: number): Promise<Pick<CacheEntry, "stages" | "usage">> {
    const key = `${run.lastSeq}/${run.status}`;
    const hit = this.cache.get(run.id);
    const ttl = this.opts.liveTtlMs ?? 500;
    if (hit && hit.key === key && (ENDED.has(run.status) || now - hit.at < ttl)) {
      this.cache.delete(run.id);
      this.cache.set(run.id, hit);
      return hit;
    }
    const report = await buildRunReport(this.journal, run.id);
    const totals = report ? reportTotals(report) : emptyTotals();
    const entry: CacheEntry = { key, at: now, stages: totals.stages, usage: totals.usage };
    this.cache.delete(run.id);
    this.cache.set(run.id, entry);
    const max = this.opts.maxEntries ?? 5000;
    while (this.cache.size > max) this.cache.delete(this.cache.keys().next().value!);
    return entry;
  }
}
