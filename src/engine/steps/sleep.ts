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
 * A sleep that stops before its wake-up time (Ctrl-C, a crash, the time
 * budget) is shown as waiting until then (run-report.ts), not completed.
 */

import { StepFailedError } from "../../shared/errors.ts";
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
    const { wakeAt } = recorded.checkpoint.result as { wakeAt: number };
    left = remainingMs(wakeAt, ms, exec.tree.clock.now());
    if (left > 0) exec.assertMayStart(scope);
  } else {
    exec.assertMayStart(scope);
    const wakeAt = exec.tree.clock.now() + ms;
    await exec.tree.append({ runId: exec.runId, type: EVENT.checkpoint, key: position, payload: { ...step, result: { wakeAt } } });
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
