/**
 * Stopping a stage's processes with a grace period, for the shell runner
 * and the CLI agents' (agent-process.ts) alike: SIGTERM to the stage's
 * process group and to its other processes (`others`: found through
 * process-tree.ts), then, once the grace period is over, SIGKILL to the
 * group and to whatever of them is still running, found again. The grace
 * ends early once the group's leader has exited and nothing of the stage is
 * left (checked every 100 ms), so an exiting worker, which waits for every
 * stop in its grace (process-groups.ts: trackStop), is not held up.
 *
 * A sandboxed stage's group leader is bubblewrap: it gets no SIGTERM, since
 * its death ends the sandbox at once (`--die-with-parent` kills its init,
 * and the kernel every process of the PID namespace), which would turn the
 * SIGTERM into an immediate SIGKILL. The processes inside get it (bwrap's
 * descendants; its init, PID 1 of the namespace, has no handler for it and
 * ignores it); bwrap ends when the stage's first process does
 * (docs/design/sandbox.md).
 *
 * That end would cut the grace short: a CLI agent exits within milliseconds
 * of its SIGTERM, bwrap's init then exits, and the kernel SIGKILLs what is
 * left in the namespace, a tool's shell that had no CPU yet to run its trap
 * among it (on a busy machine). So bwrap's init (the leader's child) is held
 * stopped (SIGSTOP, which an ancestor namespace may always send) for the
 * grace: it cannot reap the stage's first process and end the namespace
 * while the other processes still run their cleanup. It is continued once
 * nothing else of the stage runs, or at the grace's end with the SIGKILL.
 */

import { killGroup, trackStop } from "./process-groups.ts";
import { parentOf, signalProcesses, stillRunning, type ProcRef } from "./process-tree.ts";

export const KILL_GRACE_MS = 2_000;

export interface StopTarget {
  /** The stage's process-group leader: its program, or bwrap when sandboxed. */
  pid: number | undefined;
  /** The leader is bubblewrap (see the header). */
  sandboxed: boolean;
  /** The leader has exited. */
  exited(): boolean;
  /** The stage's processes besides the leader, as they are now. */
  others(): ProcRef[];
}

/** SIGTERM now, SIGKILL after the grace period to what is left (see the header). */
export function stopWithGrace(target: StopTarget, graceMs = KILL_GRACE_MS): void {
  const first = target.others();
  if (target.exited() && first.length === 0) return; // the leader ended and left nothing behind
  // bwrap's init, held stopped for the grace (see the header).
  const held = target.sandboxed && target.pid !== undefined ? first.filter((ref) => parentOf(ref) === target.pid) : [];
  const heldPids = new Set(held.map((ref) => ref.pid));
  signalProcesses(held, "SIGSTOP");
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    signalProcesses(held, "SIGCONT");
  };
  if (!target.sandboxed && target.pid !== undefined) killGroup(target.pid, "SIGTERM");
  signalProcesses(first, "SIGTERM");
  const until = Date.now() + graceMs;
  trackStop(
    new Promise<void>((resolve) => {
      const tick = () => {
        const left = [...first, ...target.others()].filter(stillRunning);
        if (left.every((ref) => heldPids.has(ref.pid))) release();
        if (target.exited() && left.length === 0) return resolve();
        if (Date.now() < until) return void setTimeout(tick, 100).unref();
        if (target.pid !== undefined) killGroup(target.pid, "SIGKILL");
        signalProcesses(left, "SIGKILL");
        release();
        resolve();
      };
      setTimeout(tick, 100).unref();
    }),
  );
}
