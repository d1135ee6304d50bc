/**
 * BEGIN IMMEDIATE against another process's write transaction
 * (Statements.beginImmediate): it waits, in short sleeps of its own rather
 * than SQLite's busy handler (the journal's connections do not wait
 * themselves: busy_timeout 0), until the other commits; and it gives up
 * with SQLITE_BUSY once its busy timeout has passed. Reads and writes
 * through the journal retry the same way. The other writer is a real
 * process holding the lock.
 */

import { Database } from "bun:sqlite";
import { afterEach, expect, test } from "bun:test";
import { dirname, join } from "node:path";
import { openJournal } from "../../src/journal/open.ts";
import { Statements } from "../../src/journal/sqlite/statements.ts";
import { newRunId } from "../../src/shared/ids.ts";
import { thisProcessHolder } from "../../src/shared/process-info.ts";
import { streamLines } from "../helpers/lines.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const cleanups: (() => void)[] = [];

afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
  removeTempDirs();
});

/** A journal file, and a process that holds its write lock for `holdMs`, then commits a row to `meta`. */
async function lockedJournal(holdMs: number): Promise<{ file: string; done: Promise<number> }> {
  const home = makeTempDir();
  await (await openJournal({ home, durability: "full" })).close();
  const file = join(home, "atomic.db");
  const script = `
    import { Database } from "bun:sqlite";
    const db = new Database(${JSON.stringify(file)});
    db.run("begin immediate");
    db.run("insert into meta (key, value) values ('holder', 'committed')");
    console.log("locked");
    Bun.sleepSync(${holdMs});
    db.run("commit");
    db.close();
  `;
  const proc = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "inherit" });
  cleanups.push(() => proc.kill("SIGKILL"));
  for await (const lines of streamLines(proc.stdout)) if (lines.includes("locked")) break;
  return { file, done: proc.exited };
}

function statementsOn(file: string, busyTimeoutMs: number): { db: Database; s: Statements } {
  const db = new Database(file);
  db.run("pragma busy_timeout = 0"); // as SqliteJournal.open leaves its connection
  const s = new Statements(db, "full", busyTimeoutMs);
  cleanups.push(() => {
    s.finalize();
    db.close();
  });
  return { db, s };
}

test("BEGIN IMMEDIATE waits for another process's write transaction, then holds the lock after its commit", async () => {
  const { file, done } = await lockedJournal(300);
  const { db, s } = statementsOn(file, 10_000);
  s.beginImmediate();
  // The other process committed before this transaction began: its row is there.
  expect(db.query("select value from meta where key = 'holder'").get()).toEqual({ value: "committed" });
  db.run("commit");
  expect(await done).toBe(0);
});

test("past its busy timeout it gives up with SQLITE_BUSY, outside any transaction", async () => {
  const { file } = await lockedJournal(5_000);
  const { db, s } = statementsOn(file, 100);
  let error: unknown;
  try {
    s.beginImmediate();
  } catch (err) {
    error = err;
  }
  expect((error as { code?: string }).code).toBe("SQLITE_BUSY");
  expect(db.inTransaction).toBe(false);
});

test("a journal's write (a lease) waits for another process's write transaction, through the journal's own connection", async () => {
  const { file, done } = await lockedJournal(300);
  const journal = await openJournal({ home: dirname(file), durability: "full" });
  cleanups.push(() => void journal.close());
  const rootId = newRunId();
  const lease = await journal.acquireLease(rootId, thisProcessHolder(), { timeoutMs: 60_000 });
  expect((await journal.getLease(rootId))?.holderId).toBe(lease.holderId);
  expect(await done).toBe(0);
});
