/**
 * The group guard: stage process groups die with the process that started
 * them, however it dies (kill -9 of the worker, or of the whole process
 * group of the root, its coordinator and its workers at once).
 *
 * A parent-death signal (prctl PR_SET_PDEATHSIG, `setpriv --pdeathsig`)
 * would reach the stage's first process only: it is not inherited by that
 * process's children, and a shell stage's work is mostly its children. A
 * subreaper dies with the same kill. So each process that starts stage
 * groups has one small guard process beside it: `/bin/sh` in a session of
 * its own (a kill of the starter's process group does not reach it), whose
 * stdin is a pipe only the starter holds. The starter writes the list of its
 * live groups as one line whenever it changes (process-groups.ts); the
 * guard keeps the last line (`tail -n 1`). When the starter is gone, whatever the cause,
 * the kernel closes its end of the pipe, the guard reads end-of-file, kills
 * every group of the last line with SIGKILL and exits. A starter that exits
 * normally has killed its groups itself and left the list empty.
 *
 * The guard starts with the first group (a run without stages starts none)
 * and is started again if it goes away. A stage that leaves its group
 * (setsid) escapes it; `atomic resume` and the end of a drive still find
 * such a process by the run id in its environment (shared/run-processes.ts).
 */

import type { Subprocess } from "bun";

// `tail` keeps the last line and prints it at end-of-file; `kill -- -pgid ...` kills the groups. (Not a
// `while read` loop: the shell's `read` takes a pipe one byte per system call, ten or more per change.)
const GUARD_SCRIPT = 'g=$(tail -n 1); [ -n "$g" ] && kill -s KILL -- $g 2>/dev/null; exit 0';

let guard: Subprocess<"pipe", "ignore", "ignore"> | undefined;

/** Tells the guard which groups to kill should this process die now. */
export function guardGroups(groups: Iterable<number>): void {
  const line = `${[...groups].map((g) => `-${g}`).join(" ")}\n`;
  if (!guard && line === "\n") return;
  try {
    guard ??= startGuard();
    guard.stdin.write(line);
    void Promise.resolve(guard.stdin.flush()).catch(() => {});
  } catch {
    // No guard can be started (no /bin/sh, no processes left): the stages still die with a normal exit.
  }
}

function startGuard(): Subprocess<"pipe", "ignore", "ignore"> {
  const proc = Bun.spawn(["/bin/sh", "-c", GUARD_SCRIPT], { stdin: "pipe", stdout: "ignore", stderr: "ignore", detached: true });
  proc.unref();
  void proc.exited.then(() => {
    if (guard === proc) guard = undefined; // killed by someone: the next change starts another one with the whole list
  });
  return proc;
}
