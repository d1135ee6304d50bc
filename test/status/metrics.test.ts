/**
 * `/metrics` reads what changed since its last scrape, not every run: over a
 * real SQLite journal seen through a wrapper that counts the journal calls a
 * scrape makes. A scrape after no change reads no event and lists no run; a
 * new run and a finished one are folded in from their own events only; a
 * live run whose lease expires shows crashed without any change to the
 * journal (its lease is looked at on every scrape). And the run list takes
 * its stage counts from the stage index: it reads no event at all; its total
 * is the end of a page that is not full, counted only for a full one.
 */

import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { EVENT } from "../../src/engine/journal-events.ts";
import { SqliteJournal } from "../../src/journal/sqlite/sqlite-journal.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { newRunId, type RunId } from "../../src/shared/ids.ts";
import { thisProcessHolder } from "../../src/shared/process-info.ts";
import { JournalMetrics } from "../../src/status/metrics.ts";
import { RunSummaries } from "../../src/status/summaries.ts";
import { seedRun } from "../helpers/seed-runs.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { waitUntil } from "../helpers/atomic.ts";

const journals: Journal[] = [];
afterEach(async () => {
  for (const j of journals.splice(0)) await j.close();
  removeTempDirs();
});

/** The journal, with a count of each method called through it (bound to the real one). */
function counted(journal: Journal): { journal: Journal; calls: Map<string, number>; readRuns: Set<string> } {
  const calls = new Map<string, number>();
  const readRuns = new Set<string>();
  const proxy = new Proxy(journal, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        calls.set(String(prop), (calls.get(String(prop)) ?? 0) + 1);
        if (prop === "readEvents") readRuns.add(String(args[0]));
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { journal: proxy, calls, readRuns };
}

function value(text: string, name: string): number {
  const m = new RegExp(`^${name.replace(/[{}"]/g, "\\$&")} (\\d+)$`, "m").exec(text);
  if (!m) throw new Error(`no ${name} in\n${text}`);
  return Number(m[1]);
}

test("a scrape reads only the runs that changed since the last one; live runs' leases on every scrape", async () => {
  const real = await SqliteJournal.open(join(makeTempDir("atomic-metrics-"), "atomic.db"), { durability: "normal" });
  journals.push(real);
  for (let i = 0; i < 20; i++) await seedRun(real, { stages: 3, status: i % 4 === 0 ? "failed" : "completed" });
  const { journal, calls, readRuns } = counted(real);
  const metrics = new JournalMetrics(journal);

  const first = await metrics.render();
  expect(value(first, 'atomic_runs{status="completed"}')).toBe(15);
  expect(value(first, 'atomic_runs{status="failed"}')).toBe(5);
  expect(value(first, "atomic_stages_started_total")).toBe(60);
  expect(value(first, "atomic_stages_completed_total")).toBe(60);
  expect(value(first, "atomic_journal_appends_total")).toBe(20 * 8);

  // nothing changed: no run listed, no event read, the same figures
  calls.clear();
  readRuns.clear();
  expect(await metrics.render()).toBe(first);
  expect(calls.get("readEvents") ?? 0).toBe(0);
  expect(calls.get("listRuns") ?? 0).toBe(0);
  expect(calls.get("countRuns") ?? 0).toBe(0);

  // one more finished run and a live one (its lease expires soon): only their events are read
  const added = await seedRun(real, { stages: 2 });
  const liveId = newRunId();
  const lease = await real.acquireLease(liveId, thisProcessHolder("metrics-test"), { timeoutMs: 300 });
  await real.append(lease, [
    {
      runId: liveId,
      type: EVENT.runStarted,
      payload: {},
      newRun: { rootId: liveId, parentId: null, parentKey: null, depth: 0, workflowName: "live", workflowPath: "/live.ts", workflowDigest: "d", inputs: {} },
    },
    { runId: liveId, type: EVENT.stepStarted, key: "0", payload: { kind: "stage", name: "s", attempt: 1 } },
  ]);
  calls.clear();
  readRuns.clear();
  const third = await metrics.render();
  expect([...readRuns].sort()).toEqual([added, liveId].sort());
  expect(value(third, 'atomic_runs{status="completed"}')).toBe(16);
  expect(value(third, 'atomic_runs{status="running"}')).toBe(1);
  expect(value(third, "atomic_stages_started_total")).toBe(63);
  expect(value(third, "atomic_journal_appends_total")).toBe(20 * 8 + 6 + 2);

  // a plain append to the live run (no change number): found through the open run's row, only its events read
  const mark = (await real.views.changesSince(0, 1000)).at(-1)!.change;
  await real.append(lease, [{ runId: liveId, type: EVENT.stepStarted, key: "1", payload: { kind: "stage", name: "t", attempt: 1 } }]);
  expect(await real.views.changesSince(mark, 1000)).toEqual([]);
  calls.clear();
  readRuns.clear();
  const fourth = await metrics.render();
  expect([...readRuns]).toEqual([liveId]);
  expect(value(fourth, "atomic_stages_started_total")).toBe(64);
  expect(value(fourth, "atomic_journal_appends_total")).toBe(20 * 8 + 6 + 3);

  // the live run's lease runs out: crashed, with no change in the journal and no event read
  await waitUntil(async () => value(await metrics.render(), 'atomic_runs{status="crashed"}') === 1, 10_000, "the live run to show crashed");
  calls.clear();
  const crashed = await metrics.render();
  expect(calls.get("readEvents") ?? 0).toBe(0);
  expect(value(crashed, 'atomic_runs{status="running"}')).toBe(0);

  // it is resumed and finishes: it moves from the live ones to completed
  const again = await real.acquireLease(liveId, thisProcessHolder("metrics-test-2"), { timeoutMs: 30_000 });
  await real.append(again, [
    { runId: liveId, type: EVENT.checkpoint, key: "0", payload: { kind: "stage", name: "s", result: { status: "completed" } } },
    { runId: liveId, type: EVENT.statusChanged, payload: { to: "completed" }, patch: { status: "completed", endedAt: Date.now() } },
  ]);
  const last = await metrics.render();
  expect(value(last, 'atomic_runs{status="completed"}')).toBe(17);
  expect(value(last, 'atomic_runs{status="crashed"}')).toBe(0);
  expect(value(last, "atomic_stages_completed_total")).toBe(60 + 2 + 1);
});

test("the run list counts stages from the stage index, reading no event", async () => {
  const real = await SqliteJournal.open(join(makeTempDir("atomic-list-"), "atomic.db"), { durability: "normal" });
  journals.push(real);
  const stages = new Map<string, number>();
  for (let i = 0; i < 60; i++) stages.set(await seedRun(real, { stages: 1 + (i % 5) }), 1 + (i % 5));
  const { journal, calls } = counted(real);
  const page = await new RunSummaries(journal).list({ limit: 50, offset: 0 });
  expect(page.total).toBe(60);
  expect(page.runs.length).toBe(50);
  for (const r of page.runs) expect(r.stages.total).toBe(stages.get(r.id)!);
  expect(page.runs.every((r) => r.stages.completed === r.stages.total)).toBe(true);
  expect(calls.get("readEvents") ?? 0).toBe(0);
});

test("the run list's total: the end of a page that is not full, else counted", async () => {
  const real = await SqliteJournal.open(join(makeTempDir("atomic-list-"), "atomic.db"), { durability: "normal" });
  journals.push(real);
  for (let i = 0; i < 60; i++) await seedRun(real, { stages: 1, workflow: i % 3 === 0 ? "third" : "other" });
  const { journal, calls } = counted(real);
  const summaries = new RunSummaries(journal);
  const total = async (q: { text?: string; limit: number; offset: number }) => {
    calls.clear();
    const page = await summaries.list(q);
    return [page.runs.length, page.total, calls.get("countRuns") ?? 0];
  };
  expect(await total({ limit: 50, offset: 0 })).toEqual([50, 60, 1]); // full: counted
  expect(await total({ limit: 50, offset: 50 })).toEqual([10, 60, 0]); // the last page: its end
  expect(await total({ text: "third", limit: 50, offset: 0 })).toEqual([20, 20, 0]);
  expect(await total({ text: "third", limit: 50, offset: 10 })).toEqual([10, 20, 0]);
  expect(await total({ text: "third", limit: 50, offset: 20 })).toEqual([0, 20, 1]); // past the end: counted
  expect(await total({ text: "nowhere", limit: 50, offset: 0 })).toEqual([0, 0, 0]);
  expect(await total({ text: "third", limit: 20, offset: 0 })).toEqual([20, 20, 1]);
});

test("runs deleted by retention leave the runs gauge at the next scrape; change numbers keep going up past them", async () => {
  const journal = await SqliteJournal.open(join(makeTempDir("atomic-metrics-"), "atomic.db"), { durability: "normal" });
  journals.push(journal);
  const ids: RunId[] = [];
  for (let i = 0; i < 4; i++) ids.push(await seedRun(journal, { stages: 1 }));
  const newest = ids[3]!;
  const metrics = new JournalMetrics(journal);
  expect(value(await metrics.render(), 'atomic_runs{status="completed"}')).toBe(4);
  const before = (await journal.views.changesSince(0, 100)).at(-1)!.change;
  // The newest run holds the highest change number: deleting it must not let the next change reuse that number.
  const deleted = await journal.retention.deleteTree(newest, () => true);
  expect(deleted?.runIds).toEqual([newest]);
  const gone = await journal.views.changesSince(before, 100);
  expect(gone.map((c) => `${c.id} ${c.deleted === true}`)).toEqual([`${newest} true`]);
  const added = await seedRun(journal, { stages: 1 });
  const after = await journal.views.changesSince(gone[0]!.change, 100);
  expect(after.map((c) => c.id)).toContain(added);
  const text = await metrics.render();
  expect(value(text, 'atomic_runs{status="completed"}')).toBe(4);
  expect(value(text, "atomic_stages_started_total")).toBe(5);
});
