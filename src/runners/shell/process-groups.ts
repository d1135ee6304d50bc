/**
 * Every stage process group this process started and has not yet seen end.
 * On an immediate exit (second Ctrl-C, fatal error) `killAllGroups()` kills
 * them synchronously, so no stage process outlives the process that ran it;
 * should this process be killed outright, its group guard kills them
 * (group-guard.ts), which hears of every change to the set.
 */

import { guardGroups } from "./group-guard.ts";

const live = new Set<number>();

/**
 * How long the guard may keep a group that ended in its list. A new group
 * is reported at once (the guard must know it before this process can
 * die); an ended one rides on the next report, or goes after this long:
 * a pool of short stages then writes to the guard, and wakes it, once per
 * stage instead of twice. Should this process die meanwhile, the guard
 * signals a group that no longer exists, which is harmless: its number
 * comes back only once the kernel's process ids have wrapped around.
 */
const ENDED_REPORT_MS = 250;
let endedReport: ReturnType<typeof setTimeout> | undefined;

export function trackGroup(pgid: number): void {
  live.add(pgid);
  report();
}

export function untrackGroup(pgid: number): void {
  if (!live.delete(pgid)) return;
  if (endedReport !== undefined) return;
  endedReport = setTimeout(report, ENDED_REPORT_MS);
  endedReport.unref();
}

function report(): void {
  clearTimeout(endedReport);
  endedReport = undefined;
  guardGroups(live);
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
