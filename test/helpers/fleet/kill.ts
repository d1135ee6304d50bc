/**
 * Finding and killing the processes of a fleet host.
 *
 * A host's processes are those in its namespace (`ip netns pids`), those
 * whose environment carries its marker (ATOMIC_TEST_FLEET_HOST, inherited by
 * everything started through the host, also what setsid or a double fork
 * took out of its process group), the descendants of what it spawned, and
 * the members of the process groups it spawned (an orphan whose parent died
 * stays in its group).
 *
 * A host crash (`crash`) must look like one event to the survivors on other
 * hosts and to the host's own processes: killed one by one, a coordinator
 * could notice its worker's death and act before its own. So every process
 * is first stopped (SIGSTOP, repeated until no new one appears: a stopped
 * process cannot fork), then all are killed, then we wait until none is
 * alive (a zombie counts as gone: it holds no socket, lock or namespace).
 */

import { readdirSync, readFileSync } from "node:fs";
import { isLive } from "../processes.ts";
import { HOST_MARKER } from "./names.ts";

/** Live processes whose environment holds the host marker, each with the marker's value (for the stale sweep: any value). */
export function markedProcesses(value?: string): { pid: number; value: string }[] {
  const found: { pid: number; value: string }[] = [];
  const key = `${HOST_MARKER}=`;
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const env = readFileSync(`/proc/${pid}/environ`, "latin1");
      const at = env.indexOf(key);
      if (at < 0 || (at > 0 && env[at - 1] !== "\0")) continue;
      const end = env.indexOf("\0", at);
      const v = env.slice(at + key.length, end < 0 ? undefined : end);
      if ((value === undefined || v === value) && isLive(pid)) found.push({ pid, value: v });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/**
 * Live descendants of `roots` (and the live roots), from /proc's parent
 * links, and the members of the process groups `groups`. A group found
 * empty (its leader not among `roots`) is deleted from `groups`: its number
 * may be reused by a stranger (pid_max may be as low as 32768).
 */
export function withDescendants(roots: Iterable<number>, groups: Set<number> = new Set()): number[] {
  const children = new Map<number, number[]>();
  const out = new Set<number>();
  const nonEmpty = new Set<number>();
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const [, ppid, pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
      children.set(ppid!, [...(children.get(ppid!) ?? []), pid]);
      if (groups.has(pgrp!) && isLive(pid)) {
        out.add(pid);
        nonEmpty.add(pgrp!);
      }
    } catch {
      // gone meanwhile
    }
  }
  const rootList = [...roots];
  // (A group whose leader still runs is kept even when empty: the leader may not have called setsid yet.)
  for (const g of groups) if (!nonEmpty.has(g) && !rootList.includes(g)) groups.delete(g);
  const todo = [...rootList, ...out];
  const seen = new Set<number>();
  while (todo.length > 0) {
    const pid = todo.pop()!;
    if (seen.has(pid)) continue;
    seen.add(pid);
    out.add(pid);
    todo.push(...(children.get(pid) ?? []));
  }
  return [...out].filter((pid) => pid !== process.pid && isLive(pid));
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // gone meanwhile
  }
}

/** Stops every process `find` reports, then SIGKILLs them all, and returns them once none is alive (throws after `timeoutMs`). */
export function crash(find: () => number[], timeoutMs = 10_000): number[] {
  const stopped = new Set<number>();
  for (let round = 0; round < 50; round++) {
    const fresh = find().filter((pid) => !stopped.has(pid));
    if (fresh.length === 0) break;
    for (const pid of fresh) {
      signal(pid, "SIGSTOP");
      stopped.add(pid);
    }
  }
  for (const pid of stopped) signal(pid, "SIGKILL");
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = find();
    if (left.length === 0) return [...stopped];
    for (const pid of left) signal(pid, "SIGKILL");
    if (Date.now() > deadline) throw new Error(`processes still alive after SIGKILL: ${left.join(", ")}`);
    Bun.sleepSync(5);
  }
}

/** Sends `sig` once to every process `find` reports (SIGTERM for a drain, SIGSTOP to freeze a host). */
export function signalAll(find: () => number[], sig: NodeJS.Signals): number[] {
  const pids = find();
  for (const pid of pids) signal(pid, sig);
  return pids;
}
