/**
 * Waiting for another process's lock on the journal file, without
 * stalling this process and without taking the CPU from the process that
 * holds the lock.
 *
 * The journal's connections do not wait inside SQLite (busy_timeout 0,
 * set by SqliteJournal.open once the file is migrated): SQLite's busy
 * handler sleeps inside the call, blocking this process's heartbeats, IPC,
 * timers and signals for as long as the lock is held (a long transaction,
 * a backup, another program holding the file). Here a statement that
 * meets SQLITE_BUSY is run again after asynchronous sleeps, 1 ms doubling
 * up to 50 ms (shared/backoff.ts), until the busy timeout has passed. SQLite offers no way to
 * be told when another process's lock goes, so a wait is a poll; it starts
 * at a millisecond, not less, and never blocks the thread: on a busy host
 * a waiter that woke every few tens of microseconds (this file did, for
 * its first 5 ms, to shave a millisecond off a claim of a no-op stage)
 * takes the CPU from the very process it waits for.
 *
 * A statement is run whole every time, and only ever synchronously from
 * BEGIN to COMMIT (SQLITE_BUSY comes at BEGIN IMMEDIATE, before it did
 * anything), so waiting asynchronously lets no other code of this process
 * into a transaction.
 */

import { backoffDelay, type Backoff } from "../../shared/backoff.ts";

const BUSY_BACKOFF: Backoff = { firstMs: 1, maxMs: 50 };

export function isBusy(err: unknown): boolean {
  return (err as { code?: string } | null)?.code === "SQLITE_BUSY";
}

/**
 * `fn()`, run again while it fails with SQLITE_BUSY, for at most `timeoutMs`,
 * after asynchronous pauses; `failedOnce`: the caller's own try just met
 * SQLITE_BUSY, so the first try here comes after a pause too.
 */
export async function retryBusy<T>(fn: () => T | Promise<T>, timeoutMs: number, failedOnce = false): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let waits = 0;
  if (failedOnce) await Bun.sleep(backoffDelay(BUSY_BACKOFF, waits++));
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!isBusy(err) || Date.now() >= deadline) throw err;
    }
    await Bun.sleep(backoffDelay(BUSY_BACKOFF, waits++));
  }
}
