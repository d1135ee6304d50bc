/**
 * libfaketime (Debian's `faketime`, installed by scripts/install-faketime.sh)
 * for the clock tests. The library (0.9.10) gives the first process it is
 * preloaded into a shared-memory segment and a semaphore,
 * /dev/shm/faketime_shm_<pid> and /dev/shm/sem.faketime_sem_<pid>, which its
 * children share; it removes them only when that process runs its exit
 * handlers, which a process killed with a signal (or one that exits without
 * them, as Bun does) never does. `removeStaleFaketimeSegments` removes those
 * of processes that are gone, so a test leaves nothing in /dev/shm.
 */

import { readdirSync, rmSync } from "node:fs";

export function removeStaleFaketimeSegments(): void {
  let names: string[];
  try {
    names = readdirSync("/dev/shm");
  } catch {
    return;
  }
  for (const name of names) {
    const m = /^(?:faketime_shm_|sem\.faketime_sem_)(\d+)$/.exec(name);
    if (!m) continue;
    try {
      process.kill(Number(m[1]), 0);
      continue; // still running: its own exit may remove it
    } catch {
      rmSync(`/dev/shm/${name}`, { force: true });
    }
  }
}
