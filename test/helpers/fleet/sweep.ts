/**
 * The stale sweep: whatever a fleet whose owner process is gone left behind
 * (the owner was SIGKILLed, or bun test ended without running its exit
 * handlers) is removed: its processes (by marker and by namespace), its
 * namespaces, links and temp directory. Its Postgres cluster has a sweep of
 * its own (test/helpers/postgres.ts), called from here too.
 *
 * A fleet's owner is known from its names (test/helpers/fleet/names.ts);
 * its directory's `owner` file also holds the owner's start time, so a pid
 * reused by another process does not keep a dead fleet's directory alive.
 *
 * Runs at every `makeFleet`, and as a script (`bun sweep.ts`) from the
 * watcher each owner starts, once the owner is gone.
 */

import { readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sweepStaleClusters } from "../postgres.ts";
import { crash, markedProcesses } from "./kill.ts";
import { DIR_PREFIX, belongsTo, ownerOf } from "./names.ts";
import { fleetNetworkNames, namespacePids, removeNetwork } from "./netns.ts";

/** The start time of `pid` (clock ticks since boot, /proc/PID/stat field 22); undefined when it is gone. */
export function startTimeOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

/** The text of a fleet directory's `owner` file for this process. */
export function ownerRecord(pid = process.pid): string {
  return `${pid} ${startTimeOf(pid) ?? ""}`;
}

function alive(pid: number, startTime?: string): boolean {
  const now = startTimeOf(pid);
  return now !== undefined && (!startTime || now === startTime);
}

/** Fleet directories in the temp directory, each with the tag it names and whether its owner is gone. */
function fleetDirs(): { dir: string; tag: string; stale: boolean }[] {
  const out: { dir: string; tag: string; stale: boolean }[] = [];
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith(DIR_PREFIX)) continue;
    const dir = join(tmpdir(), name);
    const tag = name.slice(DIR_PREFIX.length);
    let record: string;
    try {
      record = readFileSync(join(dir, "owner"), "utf8");
    } catch {
      // No owner file yet (being made) or any more (being removed): judge by the name's pid alone.
      const owner = ownerOf(tag);
      out.push({ dir, tag, stale: owner !== undefined && !alive(owner) });
      continue;
    }
    const [pid, startTime] = record.trim().split(" ");
    out.push({ dir, tag, stale: !alive(Number(pid), startTime) });
  }
  return out;
}

export function sweepStaleFleets(): void {
  const dirs = fleetDirs();
  const staleTags = new Set(dirs.filter((d) => d.stale).map((d) => d.tag));
  const stale = (name: string) => {
    const owner = ownerOf(name);
    if (owner === undefined) return false;
    return !alive(owner) || [...staleTags].some((t) => belongsTo(name, t));
  };
  const { namespaces, links } = fleetNetworkNames();
  const deadNamespaces = namespaces.filter(stale);
  crash(() => [...markedProcesses().filter((p) => stale(p.value)).map((p) => p.pid), ...deadNamespaces.flatMap(namespacePids)]);
  removeNetwork(deadNamespaces, links.filter(stale));
  for (const d of dirs) if (d.stale) rmSync(d.dir, { recursive: true, force: true });
  sweepStaleClusters();
}

if (import.meta.main) sweepStaleFleets();
