/**
 * Pausing a live run from any process: the request goes to the run's
 * control row; the driver polls it, stops starting new steps while it says
 * "pause" (running ones go on) and starts them again on "unpause".
 */

import { shownStatus } from "../journal/run-status.ts";
import type { Journal } from "../journal/journal.ts";
import type { RunRecord } from "../journal/runs.ts";
import { UsageError } from "../shared/errors.ts";

/**
 * Resolves true once the driver (and every worker) applied the request, false
 * if that did not happen within `waitMs` (the request stays and is applied
 * when the driver gets to it).
 */
export async function setRunPaused(journal: Journal, run: RunRecord, paused: boolean, waitMs = 15_000): Promise<boolean> {
  if (run.parentId) {
    throw new UsageError("not_root", `run ${run.id} is a child workflow run`, {
      hint: `${paused ? "pause" : "unpause"} its root run: atomic ${paused ? "pause" : "unpause"} ${run.rootId}`,
    });
  }
  const status = shownStatus(run, await journal.getLease(run.id));
  if (status !== "running" && status !== "paused" && status !== "awaiting_input") {
    throw new UsageError("not_running", `run ${run.id} is not running (it is ${status})`, {
      hint: status === "completed" || status === "cancelled" ? "there is nothing to pause" : `continue it with: atomic resume ${run.id}`,
    });
  }
  const rev = await journal.requestControl(run.id, paused ? "pause" : "unpause");
  const deadline = Date.now() + waitMs;
  for (;;) {
    const now = await journal.getRun(run.id);
    if (!now || now.controlAck >= rev) return true;
    if (Date.now() > deadline) return false;
    const live = shownStatus(now, await journal.getLease(run.id));
    if (live !== "running" && live !== "paused") return false;
    await Bun.sleep(50);
  }
}
