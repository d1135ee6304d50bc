/**
 * Every stage process group this process started and has not yet seen end.
 * On an immediate exit (second Ctrl-C, fatal error) `killAllGroups()` kills
 * them synchronously, so no stage process outlives the process that ran it;
 * should this process be killed outright, its group guard kills them
 * (group-guard.ts), which hears when the set stops or starts being empty.
 */

import { guardIdle, guardStarted } from "./group-guard.ts";

const live = new Set<number>();

export function trackGroup(pgid: number): void {
  live.add(pgid);
  guardStarted();
}

export function untrackGroup(pgid: number): void {
  if (live.delete(pgid) && live.size === 0) guardIdle();
}

export function killGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // the group is already gone
  }
}

export function killAllGroups(signal: NodeJS.Signals = "SIGKILL"): void {
  for (const pgid of live) killGroup(pgid, signal);
}

const stops = new Set<Promise<void>>();

/** A stop in its grace period (SIGTERM sent, SIGKILL due when `done` settles): an exiting worker waits for it. */
export function trackStop(done: Promise<void>): void {
  stops.add(done);
  void done.finally(() => stops.delete(done));
}

/** Settles when every tracked stop has finished its grace period. */
export async function stopsSettled(): Promise<void> {
  await Promise.all([...stops]);
}

export function liveGroupCount(): number {
  return live.size;
}
