/**
 * ctx.sleep: a durable timer. The wake-up time is checkpointed before the
 * wait, so a resumed run waits only for what is left of it (nothing, if it
 * is already past).
 */

import { StepFailedError } from "../../shared/errors.ts";
import type { RunExecution } from "../run-execution.ts";
import { EVENT, type StepIdentity } from "../journal-events.ts";
import { abortableDelay } from "./delay.ts";

export async function runSleep(exec: RunExecution, ms: number, name: string): Promise<void> {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw new StepFailedError(name, `ctx.sleep needs a non-negative number of milliseconds, got ${String(ms)}`, { code: "bad_step" });
  }
  const scope = exec.scope();
  const position = scope.nextPosition();
  const step: StepIdentity = { kind: "sleep", name, args: String(ms) };
  const recorded = exec.cursor.claim(position, step);
  let wakeAt: number;
  if (recorded?.checkpoint) {
    wakeAt = (recorded.checkpoint.result as { wakeAt: number }).wakeAt;
  } else {
    exec.assertMayStart(scope);
    wakeAt = Date.now() + ms;
    await exec.tree.append({ runId: exec.runId, type: EVENT.checkpoint, key: position, payload: { ...step, result: { wakeAt } } });
  }
  const left = wakeAt - Date.now();
  if (left > 0) {
    exec.tree.observer({ type: "step_started", runId: exec.runId, position, kind: "sleep", name, attempt: 1, at: Date.now() });
    try {
      await abortableDelay(left, scope.signal);
    } catch {
      throw exec.stopError(scope);
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
