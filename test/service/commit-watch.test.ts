/**
 * The embedded journal's commit watch (src/journal/sqlite/commit-watch.ts),
 * which an idle service's recovery duty waits on instead of scanning twice
 * a second: two connections to one real journal file, as two processes
 * have. Another connection's commit ends a wait (also one made between the
 * mark and the wait); the watching connection's own commits do not; a
 * stopped wait never fires.
 */

import { afterEach, beforeEach, expect, test } from "bun:test";
import { join } from "node:path";
import { SqliteJournal } from "../../src/journal/sqlite/sqlite-journal.ts";
import { makeTempDir, removeTempDir } from "../helpers/temp.ts";

let dir: string;
let mine: SqliteJournal;
let theirs: SqliteJournal;

beforeEach(async () => {
  dir = makeTempDir("atomic-commit-watch-");
  mine = await SqliteJournal.open(join(dir, "atomic.db"));
  theirs = await SqliteJournal.open(join(dir, "atomic.db"));
});

afterEach(async () => {
  await mine.close();
  await theirs.close();
  removeTempDir(dir);
});

/** A wait from `mark`: `fired` settles at its first call, `calls` counts them. */
function waitFrom(mark: number): { fired: Promise<void>; calls: () => number; stop: () => void } {
  let calls = 0;
  let resolve!: () => void;
  const fired = new Promise<void>((r) => (resolve = r));
  const stop = mine.commits!.after(mark, () => {
    calls++;
    resolve();
  });
  expect(stop).toBeFunction();
  return { fired, calls: () => calls, stop: stop! };
}

test("another connection's commit ends the wait, once; this connection's own commits leave the mark as it was", async () => {
  const mark = mine.commits!.mark();
  await mine.counters.add("trace_spans_dropped", 1);
  expect(mine.commits!.mark()).toBe(mark);
  const wait = waitFrom(mark);
  await theirs.counters.add("trace_spans_dropped", 1);
  await wait.fired;
  expect(mine.commits!.mark()).not.toBe(mark);
  // Fired and stopped: more commits call it no more (a second wait, from the new mark, sees the next one).
  const next = waitFrom(mine.commits!.mark());
  await theirs.counters.add("trace_spans_dropped", 1);
  await next.fired;
  expect(wait.calls()).toBe(1);
  expect(next.calls()).toBe(1);
});

test("a commit made between the mark and the wait ends the wait at once", async () => {
  const mark = mine.commits!.mark();
  await theirs.counters.add("trace_spans_dropped", 1);
  const wait = waitFrom(mark);
  expect(wait.calls()).toBe(1);
});

test("a stopped wait is not called when the journal changes", async () => {
  const stopped = waitFrom(mine.commits!.mark());
  stopped.stop();
  const live = waitFrom(mine.commits!.mark());
  await theirs.counters.add("trace_spans_dropped", 1);
  await live.fired;
  expect(stopped.calls()).toBe(0);
});
