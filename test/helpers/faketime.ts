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

import { existsSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { makeTempDir } from "./temp.ts";

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

/** The library, where Debian installs it (scripts/install-faketime.sh). */
export const FAKETIME_LIB = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"].find((p) => existsSync(p));

/** The environment that runs a process (and what it starts) under libfaketime, `offset` ("-1m", "+90s") from the true clock. */
export function fakeClock(offset: string): Record<string, string> {
  if (!FAKETIME_LIB) throw new Error("libfaketime is not installed; run: bash scripts/install-faketime.sh");
  const file = join(makeTempDir("atomic-clock-"), "offset");
  writeFileSync(file, `${offset}\n`);
  return { LD_PRELOAD: FAKETIME_LIB, FAKETIME_TIMESTAMP_FILE: file, FAKETIME_NO_CACHE: "1", FAKETIME_DONT_FAKE_MONOTONIC: "1" };
}
