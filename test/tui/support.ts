/**
 * Homes for the terminal tests: each test gets an ATOMIC_HOME; `cleanup()`
 * (afterEach) ends the tmux servers, then any atomic process of those homes
 * still alive (a run a killed terminal left), then removes the directories.
 */

import { killSpawned, processesWithHome, waitUntil } from "../helpers/atomic.ts";
import { isLive } from "../helpers/processes.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { killTmux } from "../helpers/tmux.ts";

const homes = new Set<string>();

export function newHome(): string {
  const home = makeTempDir("atomic-tui-");
  homes.add(home);
  return home;
}

export async function cleanup(): Promise<void> {
  killTmux();
  await killSpawned();
  for (const home of homes) {
    const pids = processesWithHome(home);
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone already
      }
    }
    await waitUntil(() => pids.every((p) => !isLive(p)), 10_000, `processes of ${home} to end`);
  }
  homes.clear();
  removeTempDirs();
}
