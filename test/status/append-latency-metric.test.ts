/**
 * The journal append histogram of /metrics takes each drive's recorded
 * histogram (engine/append-latency.ts) exactly: the same count per bucket
 * and the same sum, whatever the spread of the appends, the ones slower
 * than the last bound included.
 */

import { expect, test } from "bun:test";
import { AppendLatency, APPEND_BUCKETS } from "../../src/engine/append-latency.ts";
import { MetricSet } from "../../src/status/metric-set.ts";

function line(text: string, name: string): number {
  const m = new RegExp(`^${name.replace(/[{}"+.]/g, "\\$&")} (\\S+)$`, "m").exec(text);
  if (!m) throw new Error(`no ${name} in\n${text}`);
  return Number(m[1]);
}

test("each drive's append histogram is added with its bucket counts and its sum", async () => {
  const set = new MetricSet();
  const drives = [
    [0.2, 0.2, 0.3, 0.9, 4, 12, 60],
    [0.0001, 700, 9000, 1.5, 1.5],
    [0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 1000, 5000],
  ];
  const all: number[] = [];
  for (const ms of drives) {
    const h = new AppendLatency();
    for (const x of ms) h.observe(x);
    set.addAppendLatency(h.record()!);
    all.push(...ms);
  }
  const text = await set.render();
  expect(line(text, "atomic_journal_append_seconds_count")).toBe(all.length);
  expect(line(text, "atomic_journal_append_seconds_sum")).toBeCloseTo(all.reduce((a, b) => a + b, 0) / 1000, 6);
  for (const bound of APPEND_BUCKETS) {
    expect({ bound, n: line(text, `atomic_journal_append_seconds_bucket{le="${bound}"}`) }).toEqual({ bound, n: all.filter((x) => x / 1000 <= bound).length });
  }
  expect(line(text, 'atomic_journal_append_seconds_bucket{le="+Inf"}')).toBe(all.length);
});
