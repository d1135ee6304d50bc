/**
 * The worker's local work-lease deadline (src/pool/work-lease-deadline.ts)
 * on a clock the test moves: past its deadline a worker stops its stage
 * once the coordinator spoke without renewing (a ping, a stale receipt),
 * but not on the late, committed receipts of a coordinator catching up
 * after a stall of its own, which renew from when their heartbeats were
 * sent. The worker's behaviour through the binary is in
 * work-lease-deadline.test.ts (cannot renew: stops) and pool.test.ts (the
 * coordinator's own stall: not charged to its worker).
 */

import { expect, test } from "bun:test";
import { WorkLeaseDeadline } from "../../src/pool/work-lease-deadline.ts";

const LEASE = 2_000; // deadline: the last renewal's heartbeat + 1,600

function at(): { clock: { t: number }; deadline: WorkLeaseDeadline } {
  const clock = { t: 0 };
  const deadline = new WorkLeaseDeadline(LEASE, () => clock.t);
  deadline.started();
  return { clock, deadline };
}

test("heard from before the deadline, or not at all after it: the lease holds", () => {
  const { clock, deadline } = at();
  clock.t = 1_000;
  deadline.heard();
  clock.t = 5_000; // a silent coordinator (stalled, or gone: the IPC channel says which)
  expect(deadline.passed()).toBe(false);
});

test("a ping after the deadline with no renewal since: passed", () => {
  const { clock, deadline } = at();
  deadline.heartbeatSent("h1");
  clock.t = 1_700;
  deadline.heard();
  expect(deadline.passed()).toBe(true);
});

test("a stale receipt after the deadline: passed", () => {
  const { clock, deadline } = at();
  clock.t = 1_000;
  deadline.heartbeatSent("h1");
  clock.t = 2_700;
  expect(deadline.receipt("h1", "stale")).toBe(true);
  expect(deadline.passed()).toBe(true);
});

test("a coordinator catching up after its own stall: the late committed receipt of an old heartbeat is a renewal, not a silence", () => {
  const { clock, deadline } = at();
  clock.t = 1_000;
  deadline.heartbeatSent("h1");
  clock.t = 2_000;
  deadline.heartbeatSent("h2");
  clock.t = 3_000;
  deadline.heartbeatSent("h3");
  // It wakes at 4,000 and answers the backlog in order: h1's receipt first (its deadline, 2,600, is past).
  clock.t = 4_000;
  expect(deadline.receipt("h1", "committed")).toBe(true);
  expect(deadline.passed()).toBe(false);
  clock.t = 4_300;
  expect(deadline.receipt("h2", "committed")).toBe(true);
  expect(deadline.passed()).toBe(false);
  expect(deadline.receipt("h3", "committed")).toBe(true); // renewed from 3,000: deadline 4,600
  clock.t = 4_500;
  deadline.heard();
  expect(deadline.passed()).toBe(false);
  // Then nothing renews, and it speaks again past the deadline: passed.
  clock.t = 4_700;
  deadline.heard();
  expect(deadline.passed()).toBe(true);
});

test("a receipt of something other than a heartbeat (a result's commit) counts as hearing from the coordinator", () => {
  const { clock, deadline } = at();
  clock.t = 1_700;
  expect(deadline.receipt("commit-1", "committed")).toBe(false);
  expect(deadline.passed()).toBe(true);
});
