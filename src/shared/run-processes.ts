/**
 * Finding the processes of a run by their environment: every process a
 * drive starts (its pool's coordinator and workers, their stages, and what
 * those start) inherits ATOMIC_ROOT_RUN_ID, set by the process that drives
 * the run (cli/drive.ts). /proc shows a process's environment as it was at
 * its exec, so the driver itself (which sets the variable after its exec)
 * never matches, while everything it starts does, including a stage
 * process that left its group (setsid) or was orphaned when its worker was
 * killed. Only this user's processes can be read, and only this host's are
 * seen; Linux only (elsewhere nothing is found).
 *
 * `atomic resume` ends what an earlier drive left on this host before it
 * starts anything, and a drive ends what is left of it when it is over, so
 * no stage outlives the processes of its run and no stage runs twice side
 * by side.
 */

import { readFileSync, readdirSync } from "node:fs";
import { type VariableName } from "./config/environment.ts";

export const ROOT_RUN_ENV: VariableName = "ATOMIC_ROOT_RUN_ID";
/** A worker's id, in the environment of the stages it starts (pool/reap.ts). */
export const WORKER_ENV: VariableName = "ATOMIC_WORKER_ID";
/** The token of the group guard of the process that started a stage (runners/shell/group-guard.ts). */
export const GUARD_ENV: VariableName = "ATOMIC_GUARD";
/** The variables that tie a process to a run or to the process that started it: one that serves every run (the intercom broker) starts without them. */
export const PROCESS_MARKERS: readonly string[] = [ROOT_RUN_ENV, WORKER_ENV, GUARD_ENV];

/** SIGKILLs this user's processes whose environment holds `name=value` (never this process or its ancestors); returns how many. */
export function killProcessesWithEnv(name: string, value: string): number {
  const needle = Buffer.from(`${name}=${value}\0`);
  const spared = ancestry();
  let killed = 0;
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return 0;
  }
  for (const entry of entries) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || spared.has(pid)) continue;
    try {
      if (!readFileSync(`/proc/${pid}/environ`).includes(needle)) continue;
      process.kill(pid, "SIGKILL");
      killed++;
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return killed;
}

/** Ends every process left of run tree `rootId` on this host. */
export function endRunProcesses(rootId: string): number {
  return killProcessesWithEnv(ROOT_RUN_ENV, rootId);
}

/** This process and its ancestors (a stage of the run that itself runs atomic is not killed by it). */
function ancestry(): Set<number> {
  const pids = new Set<number>([process.pid]);
  for (let pid = process.ppid; pid > 1 && !pids.has(pid); pid = parentOf(pid)) pids.add(pid);
  return pids;
}

function parentOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) || 0;
  } catch {
    return 0;
  }
}
