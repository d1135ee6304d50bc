/**
 * Timing trace of the pool, for benchmarks (bench/pool.ts) and debugging:
 * with ATOMIC_POOL_TRACE=1 in the environment (the coordinator and its
 * workers inherit it from the root), each role writes one line per event
 * to its stderr, which is its log file (worker-logs/<role>.log):
 *
 *   pool-trace <event> <workId> <epoch ms, 3 decimals>
 *
 * The time is performance.timeOrigin + performance.now(): wall-clock
 * milliseconds comparable across the processes of one machine. Events:
 * root `ready_sent` (the stage waits for its item) and `done` (its result
 * arrived); coordinator `claim` (just before the transaction that leased
 * the item), `claimed` (the lease decided, its start about to be sent: on
 * an idle pool inside that transaction, after a worker's commit once the
 * commit is done), `complete` (a worker's commit arrived) and `committed`; worker `start` (the start message arrived and goes to the
 * runner), `spawned` (the stage's process runs), `exited` and `commit_sent`.
 * The root's lines go to its own stderr. Lines are written after the
 * current event-loop task (and at exit), so the timed path does not include
 * the writes. Off (one boolean test) when the variable is unset.
 */

import { writeStderr } from "../shared/raw-stderr.ts";
import { readEnv, type VariableName } from "../shared/config/environment.ts";

export const TRACE_ENV: VariableName = "ATOMIC_POOL_TRACE";
export const TRACE_PREFIX = "pool-trace";

export const tracing = readEnv("ATOMIC_POOL_TRACE");

export function traceNow(): number {
  return performance.timeOrigin + performance.now();
}

let pending = "";

function flush(): void {
  const text = pending;
  pending = "";
  if (text) writeStderr(text);
}

if (tracing) process.on("exit", flush);

/** `at` defaults to now (read only when tracing: a default parameter would read the clock on every call). */
export function trace(event: string, workId: string, at?: number): void {
  if (!tracing) return;
  at ??= traceNow();
  if (!pending) setImmediate(flush);
  pending += `${TRACE_PREFIX} ${event} ${workId} ${at.toFixed(3)}\n`;
}
