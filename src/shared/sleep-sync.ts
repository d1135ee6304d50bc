/**
 * Blocks this thread for `ms` milliseconds (fractions allowed, about 0.1 ms
 * at the least on these machines), without spinning: for waits that must
 * not let other code of the process run meanwhile (a log line to a full
 * pipe, the first few milliseconds of a journal statement waiting for
 * another process's lock: journal/sqlite/busy.ts).
 */

const cell = new Int32Array(new SharedArrayBuffer(4));

export function sleepSync(ms: number): void {
  Atomics.wait(cell, 0, 0, ms);
}
