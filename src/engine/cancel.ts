/**
 * Cancelling a run from any process.
 *
 * A live run (its driver holds the lease) is asked through its control row,
 * and told over intercom to apply it now (pause.ts does the same); the
 * driver stops its stages and records "cancelled" itself. The caller waits
 * for that record on a back-off: the driver is another process, perhaps on
 * another machine, and the journal notifies nobody of it
 * (docs/design/processes.md "Waiting for another process"). A run nobody
 * drives (crashed, interrupted, failed, blocked) is cancelled here: take
 * its lease (a dead holder's is taken at once), record "cancelled" on the
 * root and on every unfinished child, abandon its queued work items, and
 * give the lease back.
 */

import { shownStatus } from "../journal/run-status.ts";
import type { Journal } from "../journal/journal.ts";
import type { RunRecord } from "../journal/runs.ts";
import { LeaseHeldError, UsageError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { thisProcessHolder } from "../shared/process-info.ts";
import { endRunProcesses } from "../shared/run-processes.ts";
import { EVENT } from "./journal-events.ts";
import { notifyDriver } from "./messaging.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";

export type CancelResult = "cancelled" | "requested" | "ended_otherwise";

/** How often the run's row is read while its driver stops it; the stages' own stop takes from milliseconds to seconds. */
const END_BACKOFF: Backoff = { firstMs: 25, maxMs: 500, jitter: 0.2 };

/** `home`: whose intercom broker reaches the driver, to tell it now (none: it finds the request at its next poll). */
export async function cancelRun(journal: Journal, run: RunRecord, waitMs: number, home?: string): Promise<{ result: CancelResult; status: string }> {
  if (run.parentId) {
    throw new UsageError("not_root", `run ${run.id} is a child workflow run`, { hint: `cancel its root run: atomic cancel ${run.rootId}` });
  }
  if (run.status === "completed" || run.status === "cancelled") {
    throw new UsageError("already_ended", `run ${run.id} already ${run.status}`, { hint: `see it with: atomic show ${run.id}` });
  }
  const lease = await journal.getLease(run.id);
  if (shownStatus(run, lease) !== "running") {
    try {
      await cancelUndriven(journal, run);
      return { result: "cancelled", status: "cancelled" };
    } catch (err) {
      if (!(err instanceof LeaseHeldError)) throw err;
      // someone resumed it meanwhile: ask them instead
    }
  }
  await journal.requestControl(run.id, "cancel");
  const deadline = Date.now() + waitMs;
  if (home && waitMs > 0) await notifyDriver(home, run.id, { type: "control" }, Math.min(waitMs, 5_000), false);
  for (let look = 0; Date.now() < deadline; look++) {
    const now = await journal.getRun(run.id);
    if (now && now.status !== "running" && now.status !== "awaiting_input") {
      return { result: now.status === "cancelled" ? "cancelled" : "ended_otherwise", status: now.status };
    }
    await Bun.sleep(Math.min(backoffDelay(END_BACKOFF, look), Math.max(0, deadline - Date.now())));
  }
  return { result: "requested", status: "running" };
}

async function cancelUndriven(journal: Journal, run: RunRecord): Promise<void> {
  const lease = await journal.acquireLease(run.id, thisProcessHolder("cancel"), { timeoutMs: 30_000 });
  try {
    endRunProcesses(run.id); // an orphaned stage of its last drive, on this host
    const runs = [run, ...(await unfinishedDescendants(journal, run.id))];
    const now = Date.now();
    await journal.append(
      lease,
      runs.map((r) => ({
        runId: r.id,
        type: EVENT.statusChanged,
        payload: { from: r.status, to: "cancelled", reason: "cancelled by atomic cancel" },
        patch: { status: "cancelled" as const, endedAt: now, clearControl: true },
      })),
    );
    // A cancelled run never starts another stage: what is still queued for its stages cannot be delivered,
    // and the stage executions its last driver queued are nobody's to run.
    await journal.messages.settleAll(lease, run.id, "the run was cancelled before the stage received it");
    await journal.work.abandon(lease);
  } finally {
    await journal.releaseLease(lease);
  }
}

async function unfinishedDescendants(journal: Journal, id: RunId): Promise<RunRecord[]> {
  const out: RunRecord[] = [];
  const children = await journal.listRuns({ parentId: id, rootsOnly: false, limit: 100_000 });
  for (const c of children) {
    if (c.status !== "completed" && c.status !== "cancelled") out.push(c);
    out.push(...(await unfinishedDescendants(journal, c.id)));
  }
  return out;
}
