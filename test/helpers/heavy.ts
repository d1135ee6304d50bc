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
 * cores (os.availableParallelism()); the others wait in line. Each test
 * holds one slot for its whole length (a test drives one `atomic run
 * --workers 1` at a time, so one heavy process besides atomic's own light
 * ones). Tests about concurrency itself do not take slots.
 *
 * The bound holds in two places:
 * - in this process, first come first served: bun runs test files one after
 *   another in one process, so one line in this module covers a whole
 *   `bun test` run;
 * - across processes, when `ATOMIC_TEST_HEAVY_SLOTS_DIR` names a folder:
 *   scripts/test.sh runs its main lane as two `bun test` processes at once
 *   and gives them one such folder, so the machine's cores bound the heavy
 *   tests of both together. A slot there is an exclusive flock(2) on one of
 *   the files `slot-0` .. `slot-<HEAVY_SLOTS - 1>`, held by a small
 *   `flock FILE sh -c 'echo; exec cat'` child that waits in the kernel
 *   (no polling) and prints a line once it holds its file; the test asks
 *   for every slot file at once, keeps the first it gets and lets the other
 *   requests go. The slot is let go by closing that child's stdin, and so
 *   also when this process dies, whatever killed it. (The util-linux `flock`
 *   command, as scripts/test.sh needs it.)
 *
 * The time a test waits for its slot is not its own: `heavyTestLimits`
 * gives bun a timeout that covers the line ahead of it and puts the test's
 * own limit on its run from the moment it holds its slot. The line ahead in
 * this process is every earlier heavy test's own limit; with a shared
 * folder the other processes' heavy tests are ahead too, whose number this
 * process does not know: `SHARED_LINE_MS` is added for them, an hour (the
 * heavy tests of a whole quiet suite hold slots for about 12 minutes of
 * wall time), every one of them still bound by its own limit.
 */

import { availableParallelism } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";

export const HEAVY_SLOTS = Math.max(1, availableParallelism());

/** The folder of slot files this process shares with others, if any (see the header). */
const SHARED_DIR = process.env.ATOMIC_TEST_HEAVY_SLOTS_DIR || undefined;
/** What a heavy test's bun timeout allows for the heavy tests of other processes ahead of it (see the header). */
export const SHARED_LINE_MS = 3_600_000;

let free = HEAVY_SLOTS;
const waiting: (() => void)[] = [];

/** Runs `fn` holding one heavy slot (waiting in line for one first). */
export async function withHeavySlot<T>(fn: () => Promise<T>): Promise<T> {
  if (free > 0) free--;
  else await new Promise<void>((resolve) => waiting.push(resolve));
  try {
    const release = SHARED_DIR ? await sharedSlot(SHARED_DIR) : () => {};
    try {
      return await fn();
    } finally {
      release();
    }
  } finally {
    const next = waiting.shift();
    if (next) next();
    else free++;
  }
}

type Holder = Subprocess<"pipe", "pipe", "ignore">;

/** Lets a slot request go: held or not yet, its lock is released (EOF ends `cat`; a `flock` still waiting is ended). */
function letGo(holder: Holder): void {
  holder.stdin.end();
  holder.kill("SIGTERM");
}

/**
 * One of the slot files of `dir`, held until the returned function is called: a request for each file at
 * once, the first granted kept, the others let go (one of them granted meanwhile is released at once).
 */
export async function sharedSlot(dir: string): Promise<() => void> {
  const holders = Array.from({ length: HEAVY_SLOTS }, (_, i): Holder =>
    Bun.spawn(["flock", join(dir, `slot-${i}`), "sh", "-c", "echo held; exec cat >/dev/null"], { stdin: "pipe", stdout: "pipe", stderr: "ignore" }),
  );
  const granted = holders.map(async (holder, i) => {
    const { value } = await holder.stdout.getReader().read();
    if (!value) throw new Error(`could not lock ${join(dir, `slot-${i}`)} for a heavy test (flock exited ${await holder.exited}); is util-linux's flock installed?`);
    return holder;
  });
  const kept = await Promise.any(granted).catch((e: AggregateError) => {
    for (const holder of holders) letGo(holder);
    throw e.errors[0];
  });
  for (const holder of holders) if (holder !== kept) letGo(holder);
  for (const g of granted) g.catch(() => {});
  return () => letGo(kept);
}

/** The sum of the own limits of the heavy tests registered so far (by the file being loaded: files run one after another). */
let lineAhead = 0;

/**
 * For a heavy test about to be registered with its own limit `ownMs`: the timeout to give bun (the longest
 * it can wait in line, every earlier heavy test's own limit and, with a shared folder, `SHARED_LINE_MS`, plus
 * its own) and a wrapper that puts `ownMs` on `fn` once it holds a slot.
 */
export function heavyTestLimits(name: string, ownMs: number): { bunTimeoutMs: number; run: (fn: () => Promise<void>) => Promise<void> } {
  const bunTimeoutMs = lineAhead + ownMs + (SHARED_DIR ? SHARED_LINE_MS : 0);
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
