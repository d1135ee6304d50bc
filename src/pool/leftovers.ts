/**
 * The worker's check, after each stage attempt, that nothing of the attempt
 * outlived its cleanup (`worker_cleanup_unconfirmed`).
 *
 * A runner ends its stage's process group (and a CLI agent's runner the
 * agent's other processes too, runners/cli-agents/agent-process.ts); a
 * process that left the group (setsid, a daemonizing command) and that the
 * runner did not find survives that. Once the runner's stops have settled,
 * the worker looks for the processes whose environment carries this
 * attempt's marker (ATOMIC_RUN_ID, ATOMIC_STAGE_KEY, ATOMIC_ATTEMPT: every
 * process of the attempt inherits them, runners/stage-env.ts) and this
 * worker's id (so another worker's copy of the attempt is never touched).
 * One the cleanup reached but that has not ended yet (a SIGKILL pending, in
 * its exit: process-tree.ts `dying`) is not counted. Each other one is a
 * survivor: it is named on the stage's result (pid and
 * command line), SIGKILLed, and said `ended` once it is seen gone within
 * CONFIRM_MS. The stage's own result stands (its work was done: a retry
 * would do it twice); the result carries the survivors
 * (`StageResult.cleanup`) and a warning, which `show`, `show --json` and
 * the status page display.
 *
 * The scan reads every process's environment (2-4 ms of CPU with some 200
 * processes on the machine), so it runs only for an attempt that made a
 * stage environment at all (runners/stage-env.ts `markerHandedOut`): an
 * agent stage whose tools started no command skips it.
 */

import type { StageCleanup, StageResult } from "../sdk/types.ts";
import { dying, markedProcesses, signalProcesses, stillRunning } from "../runners/shell/process-tree.ts";
import { markerHandedOut, stageMarker } from "../runners/stage-env.ts";
import { stopsSettled } from "../runners/shell/process-groups.ts";
import type { StageRequest } from "../runners/types.ts";
import { WORKER_ENV } from "../shared/run-processes.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";

/** How long the worker waits to see a SIGKILLed survivor gone. */
const CONFIRM_MS = 1_000;

/**
 * How often it looks meanwhile. A survivor left the stage's process group and is not this worker's child, so
 * nothing tells the worker of its end (no wait on another process's exit: Bun has no pidfd); a SIGKILLed process
 * is usually gone within a millisecond, so the looks start at 1 ms and thin out to one per 100 ms.
 */
const GONE_BACKOFF: Backoff = { firstMs: 1, maxMs: 100 };

/** The survivors of `request`'s attempt run by worker `workerId`, killed; undefined when none. */
export async function leftoverCheck(request: StageRequest, workerId: string): Promise<StageCleanup | undefined> {
  await stopsSettled();
  // No environment of this attempt was made (an agent stage that ran no command): no process carries its marker.
  if (!markerHandedOut(request)) return undefined;
  // One the runner's cleanup reached (its group's SIGKILL) may not have ended yet: it is dying, not a survivor.
  const found = markedProcesses({ ...stageMarker(request), [WORKER_ENV]: workerId } as Record<string, string>).filter((p) => !dying(p));
  if (found.length === 0) return undefined;
  signalProcesses(found, "SIGKILL");
  const until = Date.now() + CONFIRM_MS;
  for (let look = 0; found.some(stillRunning) && Date.now() < until; look++) await Bun.sleep(Math.min(backoffDelay(GONE_BACKOFF, look), until - Date.now()));
  return {
    code: "worker_cleanup_unconfirmed",
    survivors: found.map((p) => ({ pid: p.pid, command: p.command, ended: !stillRunning(p) })),
  };
}

/** `result` with `cleanup` and its warning (one sentence naming each survivor). */
export function withCleanup(result: StageResult, cleanup: StageCleanup | undefined): StageResult {
  if (!cleanup) return result;
  return { ...result, cleanup, warnings: [...(result.warnings ?? []), cleanupWarning(cleanup)] };
}

export function cleanupWarning(cleanup: StageCleanup): string {
  const n = cleanup.survivors.length;
  const named = cleanup.survivors.map((s) => `pid ${s.pid} (${s.command || "?"}): ${s.ended ? "killed" : "still running after SIGKILL"}`).join("; ");
  return `${cleanup.code}: ${n === 1 ? "1 process" : `${n} processes`} of the stage outlived its cleanup (left its process group); ${named}`;
}
