/**
 * Waiting for another process's lock on the journal file.
 *
 * The journal's connections do not wait inside SQLite (busy_timeout 0,
 * set by SqliteJournal.open once the file is migrated): SQLite's busy
 * handler sleeps 1 ms, then 2, 5, 10 ms and more, and against write
 * transactions of 50 to 100 µs (the root's checkpoints, the coordinator's
 * claims, in one file) that turned every collision into a stall of a
 * millisecond or more (40 of 500 claims of a 500-stage fan-out took over
 * 1 ms, 78 ms in all; bench/pool.ts). Here a statement that meets
 * SQLITE_BUSY is run again after short sleeps, 50 µs doubling up to 2 ms
 * (1 ms doubling up to 50 ms for the asynchronous reads, which let the
 * process go on meanwhile), until the busy timeout has passed.
 */

import { sleepSync } from "../../shared/sleep-sync.ts";

export function isBusy(err: unknown): boolean {
  return (err as { code?: string } | null)?.code === "SQLITE_BUSY";
}

/** `fn()`, run again while it fails with SQLITE_BUSY, for at most `timeoutMs`. */
export function retryBusy<T>(fn: () => T, timeoutMs: number): T {
  const deadline = Date.now() + timeoutMs;
  for (let pause = 0.05; ; pause = Math.min(pause * 2, 2)) {
    try {
      return fn();
    } catch (err) {
      if (!isBusy(err) || Date.now() >= deadline) throw err;
      sleepSync(pause);
    }
  }
}

/** The same for an asynchronous `fn`, sleeping without blocking the process. */
export async function retryBusyAsync<T>(fn: () => Promise<T> | T, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let pause = 1; ; pause = Math.min(pause * 2, 50)) {
    try {
      return await fn();
    } catch (err) {
      if (!isBusy(err) || Date.now() >= deadline) throw err;
      await Bun.sleep(pause);
    }
  }
}
