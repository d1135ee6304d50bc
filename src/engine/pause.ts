/**
 * Pausing a live run from any process: the request goes to the run's
 * control row; the driver polls it, stops starting new steps while it says
 * "pause" (running ones go on) and starts them again on "unpause".
 */

import { shownStatus } from "../journal/run-status.ts";
import type { Journal, RunRecord } from "../journal/types.ts";
import { UsageError } from "../shared/errors.ts";

export async function setRunPaused(journal: Journal, run: RunRecord, paused: boolean): Promise<void> {
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
  await journal.requestControl(run.id, paused ? "pause" : "unpause");
}
