/**
 * Counters the journal keeps for the whole home (or Postgres schema), not
 * for a run: figures a process finds out after its run's last record, so
 * they cannot travel in the run's events. Each is a row of `meta`
 * (`counter:<name>`), added to in one statement, so processes adding at
 * once lose nothing; they only grow. `/metrics` reads them at each scrape
 * (status/metrics.ts).
 *
 * - `trace_spans_dropped`: spans a drive ended but did not get to its OTLP
 *   receiver (queue full, export failed, or still unsent when the drive's
 *   last flush gave up): engine/tracing/otel-tracer.ts.
 */

export const COUNTERS = ["trace_spans_dropped"] as const;
export type CounterName = (typeof COUNTERS)[number];

export interface JournalCounters {
  /** Adds `n` (a positive integer) to the counter. */
  add(name: CounterName, n: number): Promise<void>;
  /** Every counter's value (0 for one never added to). */
  read(): Promise<Record<CounterName, number>>;
}

/** The `meta` key of a counter. */
export function counterKey(name: CounterName): string {
  return `counter:${name}`;
}

/** Values read from `meta` rows, by counter (0 where there is no row). */
export function countersFrom(rows: readonly { key: string; value: string }[]): Record<CounterName, number> {
  const out = Object.fromEntries(COUNTERS.map((n) => [n, 0])) as Record<CounterName, number>;
  for (const row of rows) {
    const name = COUNTERS.find((n) => counterKey(n) === row.key);
    if (name) out[name] = Number(row.value) || 0;
  }
  return out;
}
