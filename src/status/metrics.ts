/**
 * `/metrics` in the Prometheus text format (version 0.0.4).
 *
 * - `atomic_runs{status}`: root runs by the status a user sees (running,
 *   paused and crashed are told apart through the lease).
 * - `atomic_stages_started_total`, `..._completed_total`,
 *   `..._failed_total`: stage attempts started, stages completed, stage
 *   attempts failed, over every run (children included).
 * - `atomic_journal_appends_total`: events appended to the journal (the sum
 *   of every run's last seq).
 * A pool queue depth gauge joins these once the worker pool has a queue.
 *
 * Work per scrape follows what changed since the previous one and the
 * runs still open, not the number of runs: the journal numbers every
 * creation, patch (status, outputs...) and deletion of a run
 * (JournalViews.changesSince), and this keeps the last number it saw (the
 * cursor), each run's last seq and stored status, and the counters. A
 * scrape reads the runs that changed and the events they appended since
 * (folded into the stage counters); then each open run (running or
 * awaiting input, at any depth): its row, for the events it appended
 * without a change number (a step's records are not changes), and for a
 * root its lease (its shown status moves with time, without any change to
 * its row). The first scrape reads everything once. A run
 * deleted by retention (`atomic gc`) comes as a change marked `deleted`:
 * it leaves the runs gauge; the counters keep what it added (they count
 * what happened, and a counter never goes down).
 */

import { EVENT, type CheckpointPayload, type StepIdentity } from "../engine/journal-events.ts";
import { shownStatus } from "../journal/run-status.ts";
import type { Journal } from "../journal/journal.ts";
import { RUN_STATUSES, type RunStatus, type ShownStatus } from "../journal/runs.ts";
import type { RunChange } from "../journal/views.ts";
import type { RunId } from "../shared/ids.ts";
import type { StageResult } from "../sdk/types.ts";

const SHOWN: readonly ShownStatus[] = [...RUN_STATUSES, "paused", "crashed"];
/** Stored statuses whose shown status depends on the lease (and the clock). */
const LIVE: ReadonlySet<RunStatus> = new Set(["running", "awaiting_input"]);
const CHANGES_PAGE = 1000;
const EVENTS_PAGE = 2000;

export class JournalMetrics {
  private cursor = 0;
  /** Per run: the last seq folded into the counters; for roots also the stored status counted in `roots`. */
  private readonly seen = new Map<string, { lastSeq: number; status: RunStatus | null }>();
  /** Root runs by stored status (live ones are looked at on every scrape). */
  private readonly roots = new Map<RunStatus, number>();
  /** Runs whose stored status is open (LIVE), at any depth: true for a root. */
  private readonly open = new Map<RunId, boolean>();
  private readonly stages = { started: 0, completed: 0, failed: 0 };
  private appends = 0;
  private scraping: Promise<string> | undefined;

  constructor(private readonly journal: Journal) {}

  /** Concurrent scrapes share one pass over the journal. */
  render(): Promise<string> {
    this.scraping ??= this.scrape().finally(() => (this.scraping = undefined));
    return this.scraping;
  }

  private async scrape(): Promise<string> {
    for (;;) {
      const changes = await this.journal.views.changesSince(this.cursor, CHANGES_PAGE);
      for (const change of changes) await this.apply(change);
      if (changes.length > 0) this.cursor = changes.at(-1)!.change;
      if (changes.length < CHANGES_PAGE) break;
    }
    const now = Date.now();
    const byStatus = new Map<ShownStatus, number>(SHOWN.map((st) => [st, LIVE.has(st as RunStatus) ? 0 : (this.roots.get(st as RunStatus) ?? 0)]));
    for (const [id, root] of this.open) {
      const run = await this.journal.getRun(id);
      if (!run) continue;
      const seen = this.seen.get(id);
      if (seen && run.lastSeq > seen.lastSeq) seen.lastSeq = await this.fold(id, seen.lastSeq, run.lastSeq);
      if (!root) continue;
      const shown = shownStatus(run, await this.journal.getLease(run.id), now);
      byStatus.set(shown, (byStatus.get(shown) ?? 0) + 1);
    }
    const appends = this.appends;

    const lines = [
      "# HELP atomic_runs Root runs by status.",
      "# TYPE atomic_runs gauge",
      ...SHOWN.map((s) => `atomic_runs{status="${s}"} ${byStatus.get(s) ?? 0}`),
      "# HELP atomic_stages_started_total Stage attempts started.",
      "# TYPE atomic_stages_started_total counter",
      `atomic_stages_started_total ${this.stages.started}`,
      "# HELP atomic_stages_completed_total Stages completed.",
      "# TYPE atomic_stages_completed_total counter",
      `atomic_stages_completed_total ${this.stages.completed}`,
      "# HELP atomic_stages_failed_total Stage attempts failed.",
      "# TYPE atomic_stages_failed_total counter",
      `atomic_stages_failed_total ${this.stages.failed}`,
      "# HELP atomic_journal_appends_total Events appended to the journal.",
      "# TYPE atomic_journal_appends_total counter",
      `atomic_journal_appends_total ${appends}`,
    ];
    return `${lines.join("\n")}\n`;
  }

  /** Folds one changed run in: its new events, and (a root) its stored status. */
  private async apply(change: RunChange): Promise<void> {
    const prev = this.seen.get(change.id);
    if (change.deleted) {
      if (prev?.status) this.roots.set(prev.status, (this.roots.get(prev.status) ?? 0) - 1);
      this.open.delete(change.id);
      this.seen.delete(change.id);
      return;
    }
    const after = await this.fold(change.id, prev?.lastSeq ?? 0, change.lastSeq);
    const root = change.parentId === null;
    if (root && prev?.status) this.roots.set(prev.status, (this.roots.get(prev.status) ?? 0) - 1);
    if (root) this.roots.set(change.status, (this.roots.get(change.status) ?? 0) + 1);
    if (LIVE.has(change.status)) this.open.set(change.id, root);
    else this.open.delete(change.id);
    this.seen.set(change.id, { lastSeq: after, status: root ? change.status : null });
  }

  /** Folds the run's events after `from` up to `to` into the counters; returns the last seq folded. */
  private async fold(id: RunId, from: number, to: number): Promise<number> {
    let after = from;
    while (after < to) {
      const events = await this.journal.readEvents(id, after, EVENTS_PAGE);
      if (events.length === 0) break;
      for (const e of events) this.count(e.type, e.payload);
      after = events.at(-1)!.seq;
    }
    this.appends += after - from;
    return after;
  }

  private count(type: string, payload: unknown): void {
    const p = payload as (StepIdentity & Partial<CheckpointPayload>) | null;
    if (p?.kind !== "stage") return;
    if (type === EVENT.stepStarted) this.stages.started++;
    else if (type === EVENT.stepFailed) this.stages.failed++;
    else if (type === EVENT.checkpoint && (p.result as StageResult | undefined)?.status === "completed") this.stages.completed++;
  }
}
