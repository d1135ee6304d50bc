/**
 * Waiting for another process's lock on the journal file, without
 * stalling this process.
 *
 * The journal's connections do not wait inside SQLite (busy_timeout 0,
 * set by SqliteJournal.open once the file is migrated): SQLite's busy
 * handler sleeps 1 ms, then 2, 5, 10 ms and more, and against write
 * transactions of 50 to 100 µs (the root's checkpoints, the coordinator's
 * claims, in one file) that turned every collision into a stall of a
 * millisecond or more (40 of 500 claims of a 500-stage fan-out took over
 * 1 ms, 78 ms in all; bench/pool.ts). Here a statement that meets
 * SQLITE_BUSY is run again:
 *
 * - first after short blocking sleeps, 50 µs doubling up to 2 ms, for at
 *   most BLOCKING_BUDGET_MS in all: a collision with another process's
 *   short transaction ends within them, and the caller's await costs no
 *   event-loop turn;
 * - then after asynchronous sleeps, 1 ms doubling up to 50 ms, until the
 *   busy timeout has passed: a lock held for seconds (a long transaction,
 *   a backup, another program holding the file) must not stop this
 *   process's heartbeats, IPC, timers and signals meanwhile (issue 12).
 *
 * A statement is run whole every time, and only ever synchronously from
 * BEGIN to COMMIT (SQLITE_BUSY comes at BEGIN IMMEDIATE, before it did
 * anything), so waiting asynchronously lets no other code of this process
 * into a transaction.
 */

import { sleepSync } from "../../shared/sleep-sync.ts";

/** How long one call may block this thread in all before it waits asynchronously (ms). */
export const BLOCKING_BUDGET_MS = 5;
const MAX_BLOCKING_PAUSE_MS = 2;
const MAX_PAUSE_MS = 50;

export function isBusy(err: unknown): boolean {
  return (err as { code?: string } | null)?.code === "SQLITE_BUSY";
}

/** `fn()`, run again while it fails with SQLITE_BUSY, for at most `timeoutMs`: briefly blocking, then asynchronously. */
export async function retryBusy<T>(fn: () => T | Promise<T>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let blocked = 0;
  let pause = 0.05;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!isBusy(err) || Date.now() >= deadline) throw err;
    }
    if (blocked < BLOCKING_BUDGET_MS) {
      sleepSync(pause);
      blocked += pause;
      pause = Math.min(pause * 2, MAX_BLOCKING_PAUSE_MS);
      if (blocked >= BLOCKING_BUDGET_MS) pause = 1;
    } else {
      await Bun.sleep(pause);
      pause = Math.min(pause * 2, MAX_PAUSE_MS);
    }
  }
}
