/**
 * The group guard: stage processes die with the process that started
 * them, however it dies (kill -9 of the worker, or of the whole process
 * group of the root, its coordinator and its workers at once).
 *
 * A parent-death signal (prctl PR_SET_PDEATHSIG, `setpriv --pdeathsig`)
 * would reach the stage's first process only: it is not inherited by that
 * process's children, and a shell stage's work is mostly its children. A
 * subreaper dies with the same kill. So each process that starts stages has
 * one small guard process beside it: `/bin/sh` in a session of its own (a
 * kill of the starter's process group does not reach it), whose stdin is a
 * pipe only the starter holds. When the starter is gone, whatever the
 * cause, the kernel closes its end of the pipe and the guard reads
 * end-of-file.
 *
 * The guard is told nothing per stage. Every stage's environment carries
 * this starter's token (GUARD_ENV, set by stageEnv, last, so a stage cannot
 * change it), and so does every process a stage starts that keeps its
 * environment, in its group or not (setsid). At end-of-file the guard finds
 * them in /proc (one `grep` over every readable environment) and SIGKILLs
 * each one and the process group it leads, so a stage's group goes with its
 * leader even where a member dropped its environment.
 *
 * The starter writes a line when it has stages again ("1") and when it
 * has none ("0", at once: its last stage's group was just killed). A guard
 * whose last line was "0" exits without looking: the starter's stages were
 * all gone. One that reads end-of-file after "1" looks. A worker is
 * SIGKILLed by its coordinator when its run is over, mostly within
 * milliseconds of its last stage's end: the look, a grep over every
 * process's environment (40-60 CPU-ms on a busy 2-core machine, a tenth of
 * a small run's CPU), was made for nothing at the end of nearly every run
 * while "0" waited 250 ms to save a fan-out of short stages a write and a
 * wake-up per stage (a few microseconds each).
 *
 * The guard starts with the first stage (a run without stages starts none)
 * and is started again if it goes away. A stage process that both left its
 * group and dropped the token escapes it; `atomic resume` and the end of a
 * drive still find it by the run id in its environment
 * (shared/run-processes.ts), unless it dropped that too.
 */

import type { Subprocess } from "bun";
import { GUARD_ENV } from "../../shared/run-processes.ts";
import { readEnv, type VariableName } from "../../shared/config/environment.ts";

/** This process's token: its pid and 8 random bytes (hex), so no other starter's stages match it. */
export const guardToken = `${process.pid}-${Buffer.from(crypto.getRandomValues(new Uint8Array(8))).toString("hex")}`;

// `read` takes the pipe a byte per system call, which is right for the few bytes it ever gets (dash's read has no
// -n: each state comes as a line). `grep -z` reads each environment as NUL-separated lines; -x and -F: the whole
// line, as text. The loop kills each process and the group it leads (where it leads none, that kill fails,
// harmlessly). The token reaches the guard in its environment, under another name (its own environment must not
// match), not in its argv: /proc/PID/cmdline is every user's to read. Nothing else of this process's environment
// goes with it: a shell is no non-dumpable process (shared/non-dumpable.ts), and a stage could read the keys
// in /proc/<guard>/environ.
const NEEDLE_ENV: VariableName = "ATOMIC_GUARD_NEEDLE";
const GUARD_SCRIPT = [
  "s=0",
  'while read -r c; do s=$c; done',
  '[ "$s" = 1 ] || exit 0',
  `grep -lzxF "$${NEEDLE_ENV}" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | while read -r p; do kill -s KILL -- -$p 2>/dev/null; kill -s KILL $p 2>/dev/null; done`,
  "exit 0",
].join("\n");

let guard: Subprocess<"pipe", "ignore", "ignore"> | undefined;
/** What the guard was told last ("1": stages may be live). */
let told: "0" | "1" = "0";

/** A stage process of this process's is about to start (or has): the guard must know before this process can die. */
export function guardStarted(): void {
  tell("1");
}

/** This process has no live stage any more (the last one's group was killed). */
export function guardIdle(): void {
  tell("0");
}

function tell(state: "0" | "1"): void {
  if (state === told && (guard || state === "0")) return;
  try {
    guard ??= startGuard();
    guard.stdin.write(`${state}\n`);
    void Promise.resolve(guard.stdin.flush()).catch(() => {});
    told = state;
  } catch {
    // No guard can be started (no /bin/sh, no processes left): the stages still die with a normal exit.
  }
}

function startGuard(): Subprocess<"pipe", "ignore", "ignore"> {
  const proc = Bun.spawn(["/bin/sh", "-c", GUARD_SCRIPT], {
    env: { PATH: readEnv("PATH") ?? "/usr/bin:/bin", [NEEDLE_ENV]: `${GUARD_ENV}=${guardToken}` },
    stdin: "pipe",
    stdout: "ignore",
    stderr: "ignore",
    detached: true,
  });
  proc.unref();
  void proc.exited.then(() => {
    if (guard !== proc) return;
    guard = undefined; // killed by someone: the next start of a stage starts another one
    told = "0";
  });
  return proc;
}
