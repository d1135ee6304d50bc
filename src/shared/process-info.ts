/**
 * Who this process is (host, pid, start time) and whether a process recorded
 * as a lease holder still exists. The start time guards against pid reuse: a
 * holder is alive only if a process with its pid exists and started at the
 * same clock tick.
 *
 * The host is an identity, not a name: this machine's id (/etc/machine-id),
 * its boot id (a reboot starts a new host: no process of the last boot
 * lives) and its pid namespace (containers on one machine share the boot id
 * but not their pids), with the hostname in front for people to read. Two
 * machines with one hostname are two hosts; a pid is only meaningful on its
 * own host, so "its process is gone" is judged only for a holder whose whole
 * identity is this process's. `--host-id` / ATOMIC_HOST_ID replaces the
 * identity (for machines that share all three, e.g. network namespaces).
 */

import { readFileSync, readlinkSync } from "node:fs";
import { hostname } from "node:os";
import { newHolderId, type HolderId } from "./ids.ts";
import { readEnv } from "./config/environment.ts";

export interface ProcessIdentity {
  host: string;
  pid: number;
  /** Process start time (Linux /proc starttime), to survive pid reuse; 0 if unknown. */
  pidStart: number;
}

let host: string | undefined;

/** This process's host identity (see the file note), computed once. */
export function hostId(): string {
  host ??= readEnv("ATOMIC_HOST_ID") || detectHostId();
  return host;
}

/** This machine's id (/etc/machine-id), or "" where there is none. */
export function machineId(): string {
  return firstLine("/etc/machine-id") || firstLine("/var/lib/dbus/machine-id");
}

function detectHostId(): string {
  const machine = machineId();
  const boot = firstLine("/proc/sys/kernel/random/boot_id");
  let pidns = "";
  try {
    pidns = /\[(\d+)\]/.exec(readlinkSync("/proc/self/ns/pid"))?.[1] ?? "";
  } catch {
    // not Linux: the machine id and boot id (where there are any) stand alone
  }
  return [hostname(), machine, boot, pidns].join("/");
}

function firstLine(path: string): string {
  try {
    return readFileSync(path, "utf8").split("\n")[0]!.trim();
  } catch {
    return "";
  }
}

/** For messages: the hostname part of a recorded host identity (the whole of an overridden one). */
export function hostLabel(id: string): string {
  return id.split("/")[0] || id;
}

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

/** True when the holder ran on this very host (the whole identity) and its process is gone (or was replaced). */
export function isLocalHolderDead(holder: ProcessIdentity): boolean {
  if (holder.host !== hostId()) return false;
  if (!isPidAlive(holder.pid)) return true;
  if (holder.pidStart && processStartTime(holder.pid) !== holder.pidStart) return true;
  return false;
}

/**
 * True when the holder runs on this very host, is the same process (pid and
 * start time) and is not stopped (SIGSTOP, a debugger): then it is driving,
 * whatever any wall clock says. False when that cannot be seen (another
 * host, no start time recorded) or is not so, and for this very process:
 * its own drives are judged by their lease keepers, not by its being alive.
 */
export function isLocalHolderRunning(holder: ProcessIdentity): boolean {
  if (holder.pid === process.pid || holder.host !== hostId() || !holder.pidStart || !isPidAlive(holder.pid)) return false;
  if (processStartTime(holder.pid) !== holder.pidStart) return false;
  return !/^[TtZX]/.test(processState(holder.pid));
}

/** Field 3 of /proc/<pid>/stat (R, S, D, T, Z...); "" where unavailable. */
function processState(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  } catch {
    return "";
  }
}

let self: (ProcessIdentity & { holderId: HolderId }) | undefined;

export function thisProcessHolder(role = "root"): ProcessIdentity & { holderId: HolderId } {
  self ??= {
    holderId: newHolderId(role),
    host: hostId(),
    pid: process.pid,
    pidStart: processStartTime(process.pid),
  };
  return self;
}
