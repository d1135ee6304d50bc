/**
 * Finding a lost worker's stage processes when its process group id never
 * reached the coordinator: a worker reports it only once the stage has run
 * 25 ms (worker.ts), so a worker that dies or freezes before that leaves
 * the coordinator no group to kill. Every worker puts
 * ATOMIC_WORKER_ID into the environment it gives its stages (not into its
 * own: /proc shows a process's environment as it was at exec), so the
 * stage and every descendant that kept its environment can be found in
 * /proc and killed (shared/run-processes.ts).
 */

import { WORKER_ENV, killProcessesWithEnv } from "../shared/run-processes.ts";

export function killStagesOfWorker(workerId: string): number {
  return killProcessesWithEnv(WORKER_ENV, workerId);
}
