/**
 * Leaving a run for a person: the service records why it stopped
 * recovering it, in one sentence, as the run's error.
 *
 * The service takes the run's lease (only a run nobody drives is left
 * this way; if a driver took it meanwhile, that driver wins and nothing is
 * written), appends a `recovery_stopped` event whose patch sets the error
 * and keeps the stored status (or, for a drive that found the workflow
 * file no longer replays, sets it back to running), and releases the lease
 * at once. The run
 * stays crashed (no lease, stored running) or parked, shows the sentence in
 * `atomic runs`, `atomic show` and the page, and the service passes it over
 * until a person resumes it (a resume clears the error).
 */

import type { Journal } from "../journal/journal.ts";
import { LeaseHeldError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { thisProcessHolder } from "../shared/process-info.ts";
import { EVENT } from "../engine/journal-events.ts";
import { RECOVERY_STOPPED } from "./due-runs.ts";

/**
 * Returns false when someone else drives the run now (nothing was written). `crashed`: also turn a run
 * the service's drive ended `failed` back to stored running (shown crashed: nobody drives it), for a
 * cause that is not the run's but its file's (it no longer replays).
 */
export async function leaveForAPerson(journal: Journal, runId: RunId, reason: string, crashed = false): Promise<boolean> {
  let lease;
  try {
    lease = await journal.acquireLease(runId, thisProcessHolder(), { timeoutMs: 10_000 });
  } catch (err) {
    if (err instanceof LeaseHeldError) return false;
    throw err;
  }
  try {
    const sentence = reason.endsWith(".") ? reason.slice(0, -1) : reason;
    await journal.append(lease, [
      {
        runId,
        type: EVENT.recoveryStopped,
        payload: { reason: sentence },
        patch: {
          ...(crashed ? { status: "running" as const, endedAt: null } : {}),
          error: {
            name: "RecoveryStopped",
            code: RECOVERY_STOPPED,
            message: `the service stopped recovering this run: ${sentence}`,
            hint: `fix the cause, then resume it: atomic resume ${runId}`,
          },
        },
      },
    ]);
  } finally {
    await journal.releaseLease(lease).catch(() => {});
  }
  return true;
}
