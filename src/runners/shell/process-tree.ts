/**
 * The processes of one stage, found through /proc (Linux; elsewhere none
 * are found and the process group is all there is).
 *
 * Killing a stage's process group is not enough for CLI agents: claude,
 * gemini and opencode start their shell tools in process groups (sessions)
 * of their own, so a `sleep 600` run by the agent's Bash tool survives a
 * kill of the agent's group. A stage's processes are therefore:
 * - the agent's descendants (parent links in /proc/PID/stat), while the
 *   agent lives;
 * - every process whose environment (as it was at its exec) carries the
 *   stage's marker variables (stage-env.ts sets ATOMIC_RUN_ID,
 *   ATOMIC_STAGE_KEY and ATOMIC_ATTEMPT; children inherit them), which
 *   still finds a tool's processes once the agent is gone and they were
 *   re-parented.
 * Each is remembered with its start time, so a pid reused in the grace
 * period between SIGTERM and SIGKILL is never signalled. This process and
 * its ancestors are never included (a stage that runs atomic itself).
 */

import { readFileSync, readdirSync } from "node:fs";

export interface ProcRef {
  pid: number;
  /** Start time in clock ticks since boot (field 22 of /proc/PID/stat). */
  start: string;
}

interface Stat {
  state: string;
  ppid: number;
  start: string;
}

function readStat(pid: number): Stat | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // fields[0] is field 3 (state): ppid is field 4, starttime field 22.
    return { state: fields[0]!, ppid: Number(fields[1]), start: fields[19]! };
  } catch {
    return undefined;
  }
}

function allPids(): number[] {
  try {
    return readdirSync("/proc")
      .map(Number)
      .filter((n) => Number.isInteger(n) && n > 0);
  } catch {
    return [];
  }
}

function spared(): Set<number> {
  const pids = new Set<number>([process.pid]);
  for (let pid = process.ppid; pid > 1 && !pids.has(pid); pid = readStat(pid)?.ppid ?? 0) pids.add(pid);
  return pids;
}

/**
 * The processes of a stage: `root`'s descendants (not `root` itself) and
 * the processes whose environment holds every `marker` pair, but for
 * those of the processes in `keep` (and `keep` themselves): the agent
 * process of the stage's next turn carries the same marker as the one that
 * just ended.
 */
export function stageProcesses(root: number | undefined, marker: Record<string, string> = {}, keep: ReadonlySet<number> = new Set()): ProcRef[] {
  const pids = allPids();
  const stats = new Map<number, Stat>();
  for (const pid of pids) {
    const s = readStat(pid);
    if (s) stats.set(pid, s);
  }
  const found = new Set<number>();
  if (root !== undefined) {
    const children = new Map<number, number[]>();
    for (const [pid, s] of stats) children.set(s.ppid, [...(children.get(s.ppid) ?? []), pid]);
    const todo = [...(children.get(root) ?? [])];
    while (todo.length) {
      const pid = todo.pop()!;
      if (found.has(pid)) continue;
      found.add(pid);
      todo.push(...(children.get(pid) ?? []));
    }
  }
  const needles = Object.entries(marker).map(([k, v]) => Buffer.from(`${k}=${v}\0`));
  if (needles.length) {
    for (const pid of stats.keys()) {
      if (found.has(pid)) continue;
      try {
        const env = readFileSync(`/proc/${pid}/environ`);
        if (needles.every((n) => env.includes(n))) found.add(pid);
      } catch {
        // gone meanwhile, or not ours to read
      }
    }
  }
  const skip = spared();
  const kept = (pid: number) => {
    for (let p = pid, hops = 0; p > 1 && hops < 256; p = stats.get(p)?.ppid ?? 0, hops++) if (keep.has(p)) return true;
    return false;
  };
  return [...found].filter((pid) => !skip.has(pid) && pid !== root && !kept(pid)).map((pid) => ({ pid, start: stats.get(pid)!.start }));
}

/** The process is still the one that was found (same start time) and has not exited (zombies are done). */
export function stillRunning(ref: ProcRef): boolean {
  const s = readStat(ref.pid);
  return s !== undefined && s.start === ref.start && s.state !== "Z";
}

/** The pid of the process's parent while it is still the one that was found (same start time). */
export function parentOf(ref: ProcRef): number | undefined {
  const s = readStat(ref.pid);
  return s?.start === ref.start ? s.ppid : undefined;
}

/** Signals each process that is still the one that was found (same start time). */
export function signalProcesses(refs: Iterable<ProcRef>, signal: NodeJS.Signals): void {
  for (const ref of refs) {
    if (readStat(ref.pid)?.start !== ref.start) continue;
    try {
      process.kill(ref.pid, signal);
    } catch {
      // gone meanwhile
    }
  }
}

/**
 * The processes whose environment holds every `marker` pair, with their
 * command lines: environments are read first, so a scan of a machine with
 * nothing left behind reads one file per process and nothing else.
 */
export function markedProcesses(marker: Record<string, string>): (ProcRef & { command: string })[] {
  const needles = Object.entries(marker).map(([k, v]) => Buffer.from(`${k}=${v}\0`));
  if (needles.length === 0) return [];
  const skip = spared();
  const out: (ProcRef & { command: string })[] = [];
  for (const pid of allPids()) {
    if (skip.has(pid)) continue;
    try {
      const env = readFileSync(`/proc/${pid}/environ`);
      if (!needles.every((n) => env.includes(n))) continue;
      const s = readStat(pid);
      if (!s || s.state === "Z") continue;
      out.push({ pid, start: s.start, command: commandLine(pid) });
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return out;
}

/** A process's command line, its arguments joined by spaces (capped at 200 characters); "" once it is gone. */
function commandLine(pid: number): string {
  try {
    const line = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").trim();
    return line.length > 200 ? `${line.slice(0, 199)}…` : line;
  } catch {
    return "";
  }
}

/** PF_EXITING (include/linux/sched.h): the process is in its exit. */
const PF_EXITING = 0x4;
/** SIGKILL's bit in /proc/PID/status's pending-signal masks. */
const SIGKILL_BIT = 1n << 8n;

/**
 * The process is on its way out: gone, a zombie, in its exit (PF_EXITING),
 * or with a SIGKILL pending (the kernel marks every thread of a process a
 * SIGKILL was sent to before the process runs again). A process a group
 * kill just reached is dying, not a survivor of it.
 */
export function dying(ref: ProcRef): boolean {
  try {
    const stat = readFileSync(`/proc/${ref.pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[19] !== ref.start || fields[0] === "Z" || fields[0] === "X") return true;
    if (Number(fields[6]) & PF_EXITING) return true;
    const status = readFileSync(`/proc/${ref.pid}/status`, "utf8");
    for (const key of ["SigPnd", "ShdPnd"]) {
      const hex = new RegExp(`^${key}:\\s*([0-9a-f]+)$`, "m").exec(status)?.[1];
      if (hex && BigInt(`0x${hex}`) & SIGKILL_BIT) return true;
    }
    return false;
  } catch {
    return true;
  }
}
