/**
 * How long a drive's journal appends took, as a histogram: from a step
 * handing its record to the group-commit writer to the record being
 * committed (the wait for the batch included: what the step waits).
 * The drive records it, counted since its start, with the root run's end
 * record (`status_changed`: `appendLatency`), on SQLite and Postgres alike;
 * `/metrics` folds it into `atomic_journal_append_seconds`
 * (docs/design/observability.md). A drive killed before its end leaves no
 * figures.
 */

/** Upper bounds of the buckets, in seconds (shared with the metric). */
export const APPEND_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5] as const;

/** The `appendLatency` field of a root's end record. */
export interface AppendLatencyRecord {
  /** Appends timed. */
  count: number;
  /** Their durations added up, in milliseconds. */
  sumMs: number;
  /** Appends per bucket of APPEND_BUCKETS (not cumulative); those slower than the last bound are `count` minus their sum. */
  buckets: number[];
  /** The slowest, in milliseconds. */
  maxMs: number;
}

export class AppendLatency {
  private rec: AppendLatencyRecord = { count: 0, sumMs: 0, buckets: APPEND_BUCKETS.map(() => 0), maxMs: 0 };

  observe(ms: number): void {
    const r = this.rec;
    r.count++;
    r.sumMs += ms;
    if (ms > r.maxMs) r.maxMs = ms;
    const s = ms / 1000;
    const i = APPEND_BUCKETS.findIndex((b) => s <= b);
    if (i >= 0) r.buckets[i]!++;
  }

  /** What was observed, rounded to microseconds; undefined when nothing was. */
  record(): AppendLatencyRecord | undefined {
    const r = this.rec;
    if (r.count === 0) return undefined;
    return { count: r.count, sumMs: Math.round(r.sumMs * 1000) / 1000, buckets: [...r.buckets], maxMs: Math.round(r.maxMs * 1000) / 1000 };
  }
}
