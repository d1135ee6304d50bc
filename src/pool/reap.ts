/**
 * Finding a lost worker's stage processes when its process group id never
 * reached the coordinator: a worker reports it only once the stage has run
 * 25 ms (worker.ts), so a worker that dies or freezes before that leaves
 * the coordinator no group to kill. Every worker puts
 * ATOMIC_WORKER_ID into the environment it gives its stages (not into its
 * own: /proc shows a process's environment as it was at exec), so the
 * stage and every descendant that kept its environment can be found in
 * /proc and killed. Linux only; elsewhere this finds nothing.
 */

import { readFileSync, readdirSync } from "node:fs";

export const WORKER_ENV = "ATOMIC_WORKER_ID";

export function killStagesOfWorker(workerId: string): number {
  const needle = Buffer.from(`${WORKER_ENV}=${workerId}\0`);
  let killed = 0;
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return 0;
  }
  for (const entry of entries) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      if (!readFileSync(`/proc/${pid}/environ`).includes(needle)) continue;
      process.kill(pid, "SIGKILL");
      killed++;
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return killed;
}
