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
 * Stage counters are folded from the events incrementally: each scrape
 * reads only events after the seq it saw last time for each run, so a
 * scrape costs what changed since the previous one, not the history.
 */

import { EVENT, type CheckpointPayload, type StepIdentity } from "../engine/journal-events.ts";
import { shownStatus } from "../journal/run-status.ts";
import { RUN_STATUSES, type Journal, type ShownStatus } from "../journal/types.ts";
import type { StageResult } from "../sdk/types.ts";

const SHOWN: readonly ShownStatus[] = [...RUN_STATUSES, "paused", "crashed"];
const PAGE = 2000;

export class JournalMetrics {
  private readonly seen = new Map<string, number>();
  private stages = { started: 0, completed: 0, failed: 0 };
  private scraping: Promise<string> | undefined;

  constructor(private readonly journal: Journal) {}

  /** Concurrent scrapes share one pass over the journal. */
  render(): Promise<string> {
    this.scraping ??= this.scrape().finally(() => (this.scraping = undefined));
    return this.scraping;
  }

  private async scrape(): Promise<string> {
    const now = Date.now();
    const byStatus = new Map<ShownStatus, number>(SHOWN.map((s) => [s, 0]));
    for (const status of RUN_STATUSES) {
      if (status === "running") continue;
      byStatus.set(status, await this.journal.countRuns({ status }));
    }
    for (const run of await this.journal.listRuns({ status: "running" })) {
      const shown = shownStatus(run, await this.journal.getLease(run.id), now);
      byStatus.set(shown, (byStatus.get(shown) ?? 0) + 1);
    }

    let appends = 0;
    for (const run of await this.journal.listRuns({ rootsOnly: false })) {
      appends += run.lastSeq;
      let after = this.seen.get(run.id) ?? 0;
      while (after < run.lastSeq) {
        const events = await this.journal.readEvents(run.id, after, PAGE);
        if (events.length === 0) break;
        for (const e of events) this.count(e.type, e.payload);
        after = events.at(-1)!.seq;
      }
      this.seen.set(run.id, after);
    }

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

  private count(type: string, payload: unknown): void {
    const p = payload as (StepIdentity & Partial<CheckpointPayload>) | null;
    if (p?.kind !== "stage") return;
    if (type === EVENT.stepStarted) this.stages.started++;
    else if (type === EVENT.stepFailed) this.stages.failed++;
    else if (type === EVENT.checkpoint && (p.result as StageResult | undefined)?.status === "completed") this.stages.completed++;
  }
}
