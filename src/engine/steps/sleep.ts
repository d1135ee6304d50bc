/**
 * ctx.sleep: a durable timer. The wake-up time is checkpointed before the
 * wait, so a resumed run waits only for what is left of it (nothing, if it
 * is already past).
 *
 * What is left, on resume: min(wakeAt - now, ms), never negative. The
 * wall clock may have been stepped since the checkpoint (NTP, a VM
 * restored, a clock set back by hand): a clock set back would otherwise
 * make a 60 s sleep wait for the step as well. So a resumed sleep never
 * waits longer than its whole duration; a clock set forward ends it early,
 * as the wall clock says its time has come. The live wait is a timer
 * (monotonic), so a clock jump during it changes nothing.
 *
 * The clock is the tree's (../clock.ts): the wall clock, or a test's virtual one.
 *
 * Hosts with different clocks: a wake-up time read from one host's wall
 * clock and compared with another's ends a sleep early by the difference
 * when the host that takes the run over runs ahead. Where the journal has
 * a clock every host reads (Postgres: the database's), the checkpoint also
 * records the wake-up on it (`journalWakeAt`) and a resumed sleep waits
 * until that clock reaches it as well as the wall clock: a host whose clock
 * runs ahead no longer ends it early, one whose clock runs behind makes it
 * late by at most its duration (the journal's clock is read once per drive,
 * then advanced by the monotonic time since). Where it has none
 * (SQLite: its times are the writers' own clocks, so it cannot show how
 * far two clocks differ), the host's wall clock decides as above.
 * docs/guides/durability.md states both bounds.
 *
 * A sleep that stops before its wake-up time (Ctrl-C, a crash, the time
 * budget) is shown as waiting until then (run-report.ts), not completed.
 */

import { StepFailedError } from "../../shared/errors.ts";
import type { Journal } from "../../journal/journal.ts";
import { WALL_CLOCK } from "../clock.ts";
import type { StepRun } from "../step-run.ts";
import { EVENT, type StepIdentity } from "../journal-events.ts";

export async function runSleep(exec: StepRun, ms: number, name: string): Promise<void> {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw new StepFailedError(name, `ctx.sleep needs a non-negative number of milliseconds, got ${String(ms)}`, { code: "bad_step" });
  }
  const scope = exec.scope();
  const position = scope.nextPosition();
  const step: StepIdentity = { kind: "sleep", name, args: String(ms) };
  const recorded = exec.cursor.claim(position, step);
  let left: number;
  if (recorded?.checkpoint) {
    const { wakeAt, journalWakeAt } = recorded.checkpoint.result as { wakeAt: number; journalWakeAt?: number };
    const journalNow = typeof journalWakeAt === "number" ? await journalClock(exec, "low") : undefined;
    // Over when both clocks say so: never early by either (a clock behind makes it late, by at most its duration).
    const byWall = remainingMs(wakeAt, ms, exec.tree.clock.now());
    left = journalNow !== undefined ? Math.max(byWall, remainingMs(journalWakeAt!, ms, journalNow)) : byWall;
    if (left > 0) exec.assertMayStart(scope);
  } else {
    exec.assertMayStart(scope);
    const journalNow = await journalClock(exec, "high");
    const wakeAt = exec.tree.clock.now() + ms;
    const result = { wakeAt, ...(journalNow !== undefined ? { journalWakeAt: journalNow + ms } : {}) };
    await exec.tree.append({ runId: exec.runId, type: EVENT.checkpoint, key: position, payload: { ...step, result } });
    left = ms;
  }
  if (left > 0) {
    exec.tree.observer({ type: "step_started", runId: exec.runId, position, kind: "sleep", name, attempt: 1, at: Date.now() });
    try {
      await exec.tree.clock.delay(left, exec.stepSignal(scope));
    } catch {
      throw exec.stepStopError(scope);
    }
  }
  exec.tree.observer({
    type: "step_ended",
    runId: exec.runId,
    position,
    kind: "sleep",
    name,
    status: "completed",
    replayed: left <= 0 && recorded?.checkpoint !== undefined,
    at: Date.now(),
  });
}

/** What a resumed sleep still waits: until its wake-up time, but never longer than its whole duration. */
export function remainingMs(wakeAt: number, ms: number, now: number): number {
  return Math.max(0, Math.min(wakeAt - now, ms));
}

/** A reading of each journal's clock, with the monotonic times its query was sent and answered; read again after REREAD_MS. */
const REREAD_MS = 600_000;
const readings = new WeakMap<Journal, Promise<{ at: number; sent: number; answered: number }>>();

/**
 * The journal's clock now, where it has one and the tree waits on the wall clock (a test's virtual clock
 * stays in charge); undefined otherwise. One round trip per drive (and per REREAD_MS): later readings add
 * the monotonic time since, which no wall-clock step moves. The database read its clock somewhere between
 * sending and answering: "high" counts from the send (never behind that clock: a wake-up recorded no
 * earlier than the truth), "low" from the answer (never ahead of it: a resumed sleep never ends before
 * that clock says so).
 */
async function journalClock(exec: StepRun, bound: "high" | "low"): Promise<number | undefined> {
  const { journal, clock } = exec.tree;
  if (clock !== WALL_CLOCK || !journal.clockNow) return undefined;
  let reading = readings.get(journal);
  // Read again after a while: the database's clock may have been corrected meanwhile.
  if (reading && performance.now() - (await reading.catch(() => ({ answered: -Infinity }))).answered > REREAD_MS) reading = undefined;
  if (!reading) {
    const sent = performance.now();
    reading = journal.clockNow().then((at) => ({ at, sent, answered: performance.now() }));
    readings.set(journal, reading);
    reading.catch(() => readings.delete(journal));
  }
  const r = await reading;
  return r.at + (performance.now() - (bound === "high" ? r.sent : r.answered));
}
