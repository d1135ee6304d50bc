/**
 * Why a run's queued stages wait for a worker host (journal/fleet-view.ts):
 * asked of the host registry when a reader shows the run (`atomic show`,
 * the status page), only for a live run with a stage that only worker
 * hosts can run (RunReport's `hostQueue`), so other readers and the
 * journal's writers pay nothing for it.
 */

import type { Journal } from "../journal/journal.ts";
import { queueWait, queueWaitText } from "../journal/fleet-view.ts";
import type { RunReport, StepReport } from "./run-report.ts";

export async function explainQueueWaits(journal: Journal, report: RunReport, now = Date.now()): Promise<void> {
  const waiting = hostQueued(report);
  if (waiting.length === 0 || !journal.fleet) return;
  let hosts;
  try {
    hosts = await journal.fleet.hosts();
  } catch {
    return; // the registry is unreadable now: shown without a reason, asked again at the next look
  }
  for (const step of waiting) {
    const w = queueWait(hosts, step.hostQueue!, now);
    if (w) step.queueWait = queueWaitText(w, now);
  }
}

/** Queued stages waiting for a worker host, in this run and its child runs, while the run runs (paused: that is why). */
function hostQueued(report: RunReport): StepReport[] {
  if (report.status !== "running") return [];
  return report.steps.flatMap((s) => [...(s.status === "queued" && s.hostQueue ? [s] : []), ...(s.child ? hostQueued(s.child) : [])]);
}
