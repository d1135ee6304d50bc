/**
 * The stall monitor (src/pool/stall-monitor.ts) on this process's real
 * event loop, blocked with Bun.sleepSync (the stall itself, as a long
 * synchronous transaction would block it): the check it runs every period
 * is credited with the part of a stall past its due time, a reading between
 * two checks is not counted again by the check, and a stall that ends
 * before the check is due (its held-back messages are read before the
 * check) is not counted. Only lower bounds of what a stall must count, and
 * upper bounds far above what a busy machine adds, are asserted. Through
 * the binary: pool.test.ts (the coordinator stopped for twice the lease is
 * not charged to its worker).
 */

import { afterEach, expect, test } from "bun:test";
import { StallMonitor } from "../../src/pool/stall-monitor.ts";

let monitor: StallMonitor | undefined;
afterEach(() => monitor?.stop());

/** A monitor whose checks resolve `next()` in turn. */
function watched(periodMs: number): { monitor: StallMonitor; next: () => Promise<void> } {
  const m = new StallMonitor(periodMs);
  monitor = m;
  let waiting: (() => void) | undefined;
  m.runs(() => waiting?.());
  return { monitor: m, next: () => new Promise<void>((resolve) => (waiting = resolve)) };
}

test("a stall across the check's due time is counted before the check runs, once, even when read in between", async () => {
  const { monitor, next } = watched(100);
  await next();
  const before = monitor.stalledMs;
  Bun.sleepSync(600); // due 100 ms after the check: at least 500 ms of the stall lie past it
  const read = monitor.stalledMs - before;
  expect(read).toBeGreaterThanOrEqual(500);
  let atCheck = NaN;
  await new Promise<void>((resolve) => monitor.runs(() => ((atCheck = monitor.stalledMs - before), resolve())));
  expect(atCheck).toBeGreaterThanOrEqual(read);
  expect(atCheck).toBeLessThan(2 * read); // counted twice would be at least twice the reading
});

test("a stall that ends before the check is due is not counted: its held-back messages are read first", async () => {
  const { monitor, next } = watched(2_000);
  await next();
  const before = monitor.stalledMs;
  Bun.sleepSync(1_500);
  await next();
  expect(monitor.stalledMs - before).toBeLessThan(1_500);
});

test("stopped, it runs no more checks", async () => {
  const { monitor, next } = watched(50);
  await next();
  let checks = 0;
  monitor.runs(() => checks++, true);
  monitor.stop();
  // Another monitor's next check comes later than this one's would have: none of this one's ran meanwhile.
  const { next: later } = watched(150);
  await later();
  expect(checks).toBe(0);
});
