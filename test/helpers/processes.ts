/**
 * Looking at live processes through /proc, for tests that kill, stop and
 * count the processes of a run: a process is live unless it is gone or a
 * zombie (exited, not yet reaped: its parent may be stopped).
 */

import { readFileSync, readdirSync } from "node:fs";

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
