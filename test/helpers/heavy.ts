/**
 * Bounded concurrency for heavy tests: tests that start a real agent CLI
 * (test/agents), a browser (Chromium through playwright-core) or a Postgres
 * cluster of their own. Such a process costs whole CPU-seconds to start
 * (opencode 10-15, pi 2-3, measured on this project's 2-core machine:
 * test/helpers/chat-agents.ts), so a file that
 * started all its tests at once (bun runs a file's `test.concurrent` tests
 * together) made every one of them wait on the others: on 2 cores the load
 * reached 15 and first model requests came after more than 60 s.
 *
 * At most `HEAVY_SLOTS` such tests run at once, as many as the machine has
 * cores (os.availableParallelism()); the others wait in line, first come
 * first served. Each test holds one slot for its whole length (a test drives
 * one `atomic run --workers 1` at a time, so one heavy process besides
 * atomic's own light ones). bun runs test files one after another in one
 * process, so one line in this module covers the whole `bun test` run.
 * Tests about concurrency itself do not take slots.
 *
 * The time a test waits for its slot is not its own: `heavyTestLimits`
 * gives bun a timeout that covers the line ahead of it (every earlier heavy
 * test's own limit) and puts the test's own limit on its run from the
 * moment it holds its slot.
 */

import { availableParallelism } from "node:os";

export const HEAVY_SLOTS = Math.max(1, availableParallelism());

let free = HEAVY_SLOTS;
const waiting: (() => void)[] = [];

/** Runs `fn` holding one heavy slot (waiting in line for one first). */
export async function withHeavySlot<T>(fn: () => Promise<T>): Promise<T> {
  if (free > 0) free--;
  else await new Promise<void>((resolve) => waiting.push(resolve));
  try {
    return await fn();
  } finally {
    const next = waiting.shift();
    if (next) next();
    else free++;
  }
}

/** The sum of the own limits of the heavy tests registered so far (by the file being loaded: files run one after another). */
let lineAhead = 0;

/**
 * For a heavy test about to be registered with its own limit `ownMs`: the timeout to give bun (the longest
 * it can wait in line, every earlier heavy test's own limit, plus its own) and a wrapper that puts `ownMs`
 * on `fn` once it holds a slot.
 */
export function heavyTestLimits(name: string, ownMs: number): { bunTimeoutMs: number; run: (fn: () => Promise<void>) => Promise<void> } {
  const bunTimeoutMs = lineAhead + ownMs;
  lineAhead += ownMs;
  return {
    bunTimeoutMs,
    run: (fn) => withHeavySlot(() => withinLimit(fn(), ownMs, `the test "${name}"`)),
  };
}

/** `work`, or a failure naming `what` once `limitMs` passed first. */
export async function withinLimit<T>(work: Promise<T>, limitMs: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within its limit of ${limitMs / 1000} s`)), limitMs);
  });
  try {
    return await Promise.race([work, limit]);
  } finally {
    clearTimeout(timer);
  }
}
