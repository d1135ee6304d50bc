/**
 * Cancelling a run from any process.
 *
 * A live run (its driver holds the lease) is asked through its control row;
 * the driver stops its stages and records "cancelled" itself. A run nobody
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

export type CancelResult = "cancelled" | "requested" | "ended_otherwise";

export async function cancelRun(journal: Journal, run: RunRecord, waitMs: number): Promise<{ result: CancelResult; status: string }> {
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
  while (Date.now() < deadline) {
    const now = await journal.getRun(run.id);
    if (now && now.status !== "running" && now.status !== "awaiting_input") {
      return { result: now.status === "cancelled" ? "cancelled" : "ended_otherwise", status: now.status };
    }
    await Bun.sleep(100);
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
