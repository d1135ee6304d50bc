/**
 * Who this process is (host, pid, start time) and whether a process recorded
 * as a lease holder still exists. The start time guards against pid reuse: a
 * holder is alive only if a process with its pid exists and started at the
 * same clock tick.
 */

import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import { newHolderId, type HolderId } from "./ids.ts";

export interface ProcessIdentity {
  host: string;
  pid: number;
  /** Process start time (Linux /proc starttime), to survive pid reuse; 0 if unknown. */
  pidStart: number;
}

export const HOST = hostname();

/** Field 22 of /proc/<pid>/stat (clock ticks since boot); 0 where unavailable. */
export function processStartTime(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may hold spaces and parentheses: skip past its last ')'.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(rest[19]) || 0;
  } catch {
    return 0;
  }
}

export function isPidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** True when the holder ran on this host and its process is gone (or was replaced). */
export function isLocalHolderDead(holder: ProcessIdentity): boolean {
  if (holder.host !== HOST) return false;
  if (!isPidAlive(holder.pid)) return true;
  if (holder.pidStart && processStartTime(holder.pid) !== holder.pidStart) return true;
  return false;
}

let self: (ProcessIdentity & { holderId: HolderId }) | undefined;

export function thisProcessHolder(role = "root"): ProcessIdentity & { holderId: HolderId } {
  self ??= {
    holderId: newHolderId(role),
    host: HOST,
    pid: process.pid,
    pidStart: processStartTime(process.pid),
  };
  return self;
}
