/**
 * Every stage process group this process started and has not yet seen end.
 * On an immediate exit (second Ctrl-C, fatal error) `killAllGroups()` kills
 * them synchronously, so no stage process outlives the process that ran it.
 */

const live = new Set<number>();

export function trackGroup(pgid: number): void {
  live.add(pgid);
}

export function untrackGroup(pgid: number): void {
  live.delete(pgid);
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

export function liveGroupCount(): number {
  return live.size;
}
