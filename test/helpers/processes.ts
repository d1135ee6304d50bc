/**
 * Looking at live processes through /proc, for tests that kill, stop and
 * count the processes of a run: a process is live unless it is gone or a
 * zombie (exited, not yet reaped: its parent may be stopped).
 */

import { readFileSync, readdirSync } from "node:fs";

/** SIGKILL (9) in the hex masks of /proc/PID/status. */
const SIGKILL_BIT = 1n << 8n;

export function isLive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

/** Live processes (other than this one) whose environment holds `name=value`, as it was at their exec. */
export function processesWithEnv(name: string, value: string): number[] {
  const needle = Buffer.from(`${name}=${value}\0`);
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      if (readFileSync(`/proc/${pid}/environ`).includes(needle) && isLive(pid)) pids.push(pid);
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids;
}

/** Live processes (other than this one) whose environment holds `name=value`, each with its whole environment. */
export function processEnvironments(name: string, value: string): { pid: number; env: Record<string, string> }[] {
  const out: { pid: number; env: Record<string, string> }[] = [];
  for (const pid of processesWithEnv(name, value)) {
    try {
      const env: Record<string, string> = {};
      for (const pair of readFileSync(`/proc/${pid}/environ`, "utf8").split("\0")) {
        const i = pair.indexOf("=");
        if (i > 0) env[pair.slice(0, i)] = pair.slice(i + 1);
      }
      out.push({ pid, env });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** A live process that names a directory in its environment, with its command line (arguments joined by spaces). */
export interface ProcessUnder {
  pid: number;
  dir: string;
  cmdline: string;
}

/**
 * Live processes (other than this one, and other than those a SIGKILL is
 * already ending) whose environment, as it was at their exec, names one of
 * `dirs` or a path under it (`ATOMIC_HOME=/tmp/x/home`, `PATH=/tmp/x/bin:…`).
 * One pass over /proc for all the directories: about 30 µs a process.
 */
export function processesUnder(dirs: string[]): ProcessUnder[] {
  if (dirs.length === 0) return [];
  const needles = dirs.map((dir) => ({ dir, bytes: Buffer.from(dir) }));
  const found: ProcessUnder[] = [];
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const environ = readFileSync(`/proc/${pid}/environ`);
      const hit = needles.find((n) => namesPathUnder(environ, n.bytes));
      if (hit && isLive(pid) && !killPending(pid)) found.push({ pid, dir: hit.dir, cmdline: readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").trim() });
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return found;
}

/** `dir` itself or a path under it, not a longer name sharing its prefix (`/tmp/x` is not `/tmp/xy`). */
function namesPathUnder(environ: Buffer, dir: Buffer): boolean {
  for (let at = environ.indexOf(dir); at >= 0; at = environ.indexOf(dir, at + 1)) {
    const next = environ[at + dir.length];
    // "/" a path under it, ":" a list separator (PATH), 0 the end of the variable, undefined the end of the block.
    if (next === undefined || next === 0 || next === 0x2f || next === 0x3a) return true;
  }
  return false;
}

/** True when a SIGKILL is pending for `pid` (someone already ended it; it is on its way out). */
function killPending(pid: number): boolean {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return [...status.matchAll(/^(?:SigPnd|ShdPnd):\s*([0-9a-f]+)$/gm)].some((m) => (BigInt(`0x${m[1]}`) & SIGKILL_BIT) !== 0n);
}

/** Live processes whose command line is exactly `argv` (seen from outside any pid namespace a sandbox made, where `$!` would mislead). */
export function pidsRunning(argv: string[]): number[] {
  const want = `${argv.join("\0")}\0`;
  return readdirSync("/proc")
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8") === want && isLive(pid);
      } catch {
        return false;
      }
    });
}
