/**
 * Journal calls against another process's write transaction (busy.ts):
 * BEGIN IMMEDIATE itself never waits (Statements.beginImmediate answers
 * SQLITE_BUSY at once, outside any transaction); the journal call waits
 * asynchronously, so this process's timers keep running meanwhile, until
 * the other commits; it never blocks its thread between two tries and
 * tries again after pauses of a millisecond and more, not in a tight loop
 * (on a busy host that would take the CPU from the lock's holder); and it
 * gives up with storage_unavailable once its busy timeout has passed. The
 * other writer is a real process holding the lock until told to let go.
 */

import { Database } from "bun:sqlite";
import { afterEach, expect, test } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openJournal } from "../../src/journal/open.ts";
import { SqliteJournal } from "../../src/journal/sqlite/sqlite-journal.ts";
import { Statements } from "../../src/journal/sqlite/statements.ts";
import { newRunId } from "../../src/shared/ids.ts";
import { thisProcessHolder } from "../../src/shared/process-info.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { streamLines } from "../helpers/lines.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const cleanups: (() => unknown)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  removeTempDirs();
});

/** A journal file, and a process that holds its write lock until `release()`, then commits a row to `meta`. */
async function lockedJournal(): Promise<{ home: string; file: string; release: () => void; done: Promise<number> }> {
  const home = makeTempDir();
  await (await openJournal({ home, durability: "full" })).close();
  const file = join(home, "atomic.db");
  const gate = join(home, "release");
  const script = `
    import { Database } from "bun:sqlite";
    import { existsSync } from "node:fs";
    const db = new Database(${JSON.stringify(file)});
    db.run("begin immediate");
    db.run("insert into meta (key, value) values ('holder', 'committed')");
    console.log("locked");
    while (!existsSync(${JSON.stringify(gate)})) Bun.sleepSync(10);
    db.run("commit");
    db.close();
  `;
  const proc = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "inherit" });
  cleanups.push(() => proc.kill("SIGKILL"));
  for await (const lines of streamLines(proc.stdout)) if (lines.includes("locked")) break;
  return { home, file, release: () => writeFileSync(gate, ""), done: proc.exited };
}

test("BEGIN IMMEDIATE does not wait for another process's lock: SQLITE_BUSY at once, outside any transaction", async () => {
  const { file, release, done } = await lockedJournal();
  const db = new Database(file);
  db.run("pragma busy_timeout = 0"); // as SqliteJournal.open leaves its connection
  const s = new Statements(db, "full", 10_000);
  cleanups.push(() => {
    s.finalize();
    db.close();
  });
  let error: unknown;
  try {
    s.beginImmediate();
  } catch (err) {
    error = err;
  }
  expect((error as { code?: string }).code).toBe("SQLITE_BUSY");
  expect(db.inTransaction).toBe(false);
  release();
  expect(await done).toBe(0);
});

test("a journal write waits for another process's lock without stalling this process, then commits after it", async () => {
  const { home, release, done } = await lockedJournal();
  const journal = await openJournal({ home, durability: "full" });
  cleanups.push(() => journal.close());
  const rootId = newRunId();
  let settled = false;
  const acquiring = journal.acquireLease(rootId, thisProcessHolder(), { timeoutMs: 60_000 }).finally(() => (settled = true));
  // While it waits, this process's timers run: 20 ticks of a 10 ms timer, the lock still held.
  let ticks = 0;
  const timer = setInterval(() => ticks++, 10);
  cleanups.push(() => clearInterval(timer));
  await waitUntil(() => ticks >= 20, 10_000, "20 timer ticks while the journal call waits");
  expect(settled).toBe(false);
  release();
  const lease = await acquiring;
  expect((await journal.getLease(rootId))?.holderId).toBe(lease.holderId);
  expect(await done).toBe(0);
});

test("a journal write waiting for another process's lock neither blocks its thread (Atomics.wait) nor polls in a tight loop", async () => {
  const { home, release, done } = await lockedJournal();
  const journal = await openJournal({ home, durability: "full" });
  cleanups.push(() => journal.close());
  // Every try of BEGIN IMMEDIATE, and every blocking sleep of this thread, while the call waits.
  let tries = 0;
  let blockingSleeps = 0;
  const begin = Statements.prototype.beginImmediate;
  Statements.prototype.beginImmediate = function (this: Statements) {
    tries++;
    return begin.call(this);
  };
  cleanups.push(() => (Statements.prototype.beginImmediate = begin));
  const wait = Atomics.wait;
  Atomics.wait = ((...args: Parameters<typeof Atomics.wait>) => {
    blockingSleeps++;
    return wait(...args);
  }) as typeof Atomics.wait;
  cleanups.push(() => (Atomics.wait = wait));
  const acquiring = journal.acquireLease(newRunId(), thisProcessHolder(), { timeoutMs: 60_000 });
  // A second of this process's own timer ticks with the lock still held.
  let ticks = 0;
  const timer = setInterval(() => ticks++, 10);
  cleanups.push(() => clearInterval(timer));
  await waitUntil(() => ticks >= 100, 30_000, "100 timer ticks while the journal call waits");
  const during = { tries, blockingSleeps };
  release();
  await acquiring;
  expect(await done).toBe(0);
  expect(during.tries).toBeGreaterThan(1);
  expect(during.blockingSleeps).toBe(0);
  // Pauses from 1 ms doubling up to 50 ms: about 25 tries in that second, never hundreds.
  expect(during.tries).toBeLessThan(60);
});

test("calls made while one waits for the lock run after it, in order", async () => {
  const { home, release, done } = await lockedJournal();
  const journal = await openJournal({ home, durability: "full" });
  cleanups.push(() => journal.close());
  const order: string[] = [];
  const ids = [newRunId(), newRunId(), newRunId()];
  const calls = ids.map((id, i) => journal.acquireLease(id, thisProcessHolder(), { timeoutMs: 60_000 }).then(() => order.push(`lease-${i}`)));
  await Bun.sleep(50);
  release();
  await Promise.all(calls);
  expect(order).toEqual(["lease-0", "lease-1", "lease-2"]);
  expect(await done).toBe(0);
});

test("past its busy timeout a journal call gives up with storage_unavailable", async () => {
  const { file, release, done } = await lockedJournal();
  const journal = await SqliteJournal.open(file, { durability: "full", busyTimeoutMs: 200 });
  cleanups.push(() => journal.close());
  const failing = journal.acquireLease(newRunId(), thisProcessHolder(), { timeoutMs: 60_000 });
  await expect(failing).rejects.toMatchObject({ code: "storage_unavailable" });
  expect(existsSync(file)).toBe(true);
  release();
  expect(await done).toBe(0);
});
