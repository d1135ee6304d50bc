/**
 * The status views of every journal backend (JournalViews): stage tallies
 * from the stage index (grouped by root, the stored status of the run each
 * stage belongs to, state and outcome, with usage summed over every record
 * of a stage), and run change numbers that increase with every creation,
 * patch and deletion of a run (not with its plain appends), in commit
 * order, so a reader can take up where it stopped.
 * Also, on SQLite: a version 4 journal migrates to 5 with outcomes and
 * usage of its recorded stages folded from their events, and a version 6
 * journal to 7, whose stage index takes queued stages.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { JOURNAL_FILE } from "../../src/journal/open.ts";
import type { AppendEntry } from "../../src/journal/append.ts";
import type { Journal } from "../../src/journal/journal.ts";
import type { Lease } from "../../src/journal/runs.ts";
import type { StageIndexEntry } from "../../src/journal/stage-index.ts";
import type { StageTally } from "../../src/journal/views.ts";
import { newRunId, type RunId } from "../../src/shared/ids.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, insertOldRoot, sqliteAtVersion, startRoot } from "./backends.ts";
import { LATEST_SCHEMA_VERSION } from "../../src/journal/sqlite/schema-version.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

const usage = (n: number) => ({ inputTokens: n, outputTokens: 2 * n, cacheReadTokens: 3 * n, cacheWriteTokens: 4 * n, costMicroUsd: 5 * n, turns: 1 });
const stage = (key: string, state: StageIndexEntry["state"], extra: Partial<StageIndexEntry> = {}): StageIndexEntry => ({
  key,
  path: `s-${key}`,
  name: `s-${key}`,
  kind: "stage",
  state,
  attempt: 1,
  ...extra,
});

async function append(j: Journal, lease: Lease, runId: RunId, entries: Omit<AppendEntry, "runId">[]): Promise<void> {
  const out = await j.append(lease, entries.map((e) => ({ runId, ...e })));
  expect(out.every((o) => o.status === "appended")).toBe(true);
}

/** Tallies as comparable strings: `state/outcome/runStatus xN usage`. */
function shape(tallies: StageTally[], rootId: RunId): string[] {
  return tallies
    .filter((t) => t.rootId === rootId)
    .map((t) => `${t.state}/${t.outcome ?? "-"}/${t.runStatus} x${t.stages}${t.usage ? ` in=${t.usage.inputTokens} cost=${t.usage.costMicroUsd} turns=${t.usage.turns}` : ""}`)
    .sort();
}

for (const backend of BACKENDS) {
  describe(`${backend.name}: status views`, () => {
    test(`${backend.name}: stage tallies group a tree's stages by run status, state and outcome; usage adds up over a stage's records`, async () => {
      const j = await backend.open(makeTempDir("atomic-views-"));
      open.push(j);
      const { rootId, lease } = await startRoot(j, "tally");
      await append(j, lease, rootId, [
        { type: "step_started", key: "0", payload: {}, stage: stage("0", "running") },
        // a stage that failed once (with usage), then finished (with more usage)
        { type: "step_failed", key: "0", payload: {}, stage: stage("0", "failed", { usage: usage(1) }) },
        { type: "step_started", key: "0", payload: {}, stage: stage("0", "running", { attempt: 2 }) },
        { type: "checkpoint", key: "0", payload: {}, stage: stage("0", "finished", { attempt: 2, outcome: "completed", usage: usage(10) }) },
        // finished failed (failureMode "return"), no usage
        { type: "checkpoint", key: "1", payload: {}, stage: stage("1", "finished", { outcome: "failed" }) },
        // still running; and one whose last attempt failed
        { type: "step_started", key: "2", payload: {}, stage: stage("2", "running") },
        { type: "step_failed", key: "3", payload: {}, stage: stage("3", "failed") },
        // a child boundary is not a stage
        { type: "step_started", key: "4", payload: {}, stage: stage("4", "running", { kind: "child" }) },
      ]);
      // a child run of the tree, ended failed, with a stage left running
      const childId = newRunId();
      await append(j, lease, childId, [
        { type: "run_started", payload: {}, newRun: { rootId, parentId: rootId, parentKey: "4", depth: 1, workflowName: "kid", workflowPath: "/kid.ts", workflowDigest: "d", inputs: {} } },
        { type: "step_started", key: "0", payload: {}, stage: stage("0", "running", { path: "kid/s-0" }) },
        { type: "status_changed", payload: {}, patch: { status: "failed" } },
      ]);
      const other = await startRoot(j, "other");
      await append(j, other.lease, other.rootId, [{ type: "checkpoint", key: "0", payload: {}, stage: stage("0", "finished", { usage: usage(100) }) }]);

      const tallies = await j.views.stageTallies([rootId, other.rootId]);
      expect(shape(tallies, rootId)).toEqual([
        "failed/-/running x1",
        "finished/completed/running x1 in=11 cost=55 turns=2",
        "finished/failed/running x1",
        "running/-/failed x1",
        "running/-/running x1",
      ]);
      // a finished stage whose record names no outcome counts as completed
      expect(shape(tallies, other.rootId)).toEqual(["finished/completed/running x1 in=100 cost=500 turns=1"]);
      expect(await j.views.stageTallies([])).toEqual([]);
      expect(await j.views.stageTallies([newRunId()])).toEqual([]);
      // many roots at once (more than one statement's worth)
      const many = [rootId, ...Array.from({ length: 150 }, () => newRunId()), other.rootId];
      expect((await j.views.stageTallies(many)).length).toBe(tallies.length);
    });

    test(`${backend.name}: every creation and patch of a run takes a new, higher change number, a plain append none; a reader pages on from its cursor`, async () => {
      const j = await backend.open(makeTempDir("atomic-views-"));
      open.push(j);
      const a = await startRoot(j, "a");
      const b = await startRoot(j, "b");
      const first = await j.views.changesSince(0, 100);
      expect(first.map((c) => c.id)).toEqual([a.rootId, b.rootId]);
      expect(first[0]).toMatchObject({ rootId: a.rootId, parentId: null, status: "running", lastSeq: 1 });
      expect(first[1]!.change).toBeGreaterThan(first[0]!.change);
      const cursor = first.at(-1)!.change;
      expect(await j.views.changesSince(cursor, 100)).toEqual([]);

      await append(j, a.lease, a.rootId, [{ type: "tick", payload: {} }, { type: "done", payload: {}, patch: { status: "completed" } }]);
      const later = await j.views.changesSince(cursor, 100);
      expect(later.map((c) => [c.id, c.status, c.lastSeq])).toEqual([[a.rootId, "completed", 3]]);
      expect(later[0]!.change).toBeGreaterThan(cursor);
      // neither a control request nor a plain append (a step's record) is a change; a patch of b moves it after a
      await j.requestControl(b.rootId, "pause");
      await append(j, b.lease, b.rootId, [{ type: "tick", payload: {} }]);
      await append(j, b.lease, b.rootId, [{ type: "tick", payload: {} }, { type: "tick", payload: {} }]);
      expect((await j.views.changesSince(cursor, 100)).map((c) => c.id)).toEqual([a.rootId]);
      await append(j, b.lease, b.rootId, [{ type: "blocked", payload: {}, patch: { status: "blocked" } }]);
      const next = await j.views.changesSince(cursor, 100);
      expect(next.map((c) => c.id)).toEqual([a.rootId, b.rootId]);
      // paging: limit 1 at a time visits the same runs in the same order
      const paged: string[] = [];
      for (let at = cursor; ; ) {
        const page = await j.views.changesSince(at, 1);
        if (page.length === 0) break;
        paged.push(page[0]!.id);
        at = page[0]!.change;
      }
      expect(paged).toEqual([a.rootId, b.rootId]);
    });

    if (backend.readSchemaVersion) {
      test(`${backend.name}: a version 4 journal migrates: recorded stages get their outcome and usage from their events, runs their change numbers`, async () => {
        const dir = makeTempDir("atomic-mig5-");
        const db = await sqliteAtVersion(dir, 4);
        const rootId = insertOldRoot(db, "completed", 6);
        const ev = db.prepare("insert into events (run_id, seq, type, key, payload, at) values (?, ?, ?, ?, ?, 1)");
        const u = JSON.stringify(usage(1));
        ev.run(rootId, 1, "run_started", null, "{}");
        ev.run(rootId, 2, "step_failed", "0", `{"kind":"stage","usage":${u}}`);
        ev.run(rootId, 3, "checkpoint", "0", `{"kind":"stage","result":{"status":"completed","usage":${JSON.stringify(usage(10))}}}`);
        ev.run(rootId, 4, "checkpoint", "1", '{"kind":"stage","result":{"status":"failed"}}');
        ev.run(rootId, 5, "usage_recorded", null, `{"stageKey":"2","usage":${u}}`);
        ev.run(rootId, 6, "status_changed", null, "{}");
        const row = db.prepare(
          "insert into stage_index (root_id, run_id, stage_key, path, name, kind, state, attempt, updated_at) values (?, ?, ?, ?, ?, 'stage', ?, 1, 1)",
        );
        row.run(rootId, rootId, "0", "a", "a", "finished");
        row.run(rootId, rootId, "1", "b", "b", "finished");
        row.run(rootId, rootId, "2", "c", "c", "running");
        db.close();

        const j = await backend.open(dir);
        open.push(j);
        expect(backend.readSchemaVersion!(dir)).toBe(LATEST_SCHEMA_VERSION);
        expect(shape(await j.views.stageTallies([rootId]), rootId)).toEqual([
          "finished/completed/completed x1 in=11 cost=55 turns=2",
          "finished/failed/completed x1",
          "running/-/completed x1 in=1 cost=5 turns=1",
        ]);
        const changes = await j.views.changesSince(0, 10);
        expect(changes.map((c) => c.id)).toEqual([rootId]);
        expect(changes[0]!.change).toBeGreaterThan(0);
        await j.close();
        open.pop();
        const raw = new Database(join(dir, JOURNAL_FILE), { readonly: true });
        try {
          expect(raw.query("pragma foreign_key_check").all()).toEqual([]);
          expect(raw.query<{ n: number }, []>("select count(*) as n from sqlite_master where name = 'runs_by_change'").get()!.n).toBe(1);
        } finally {
          raw.close();
        }
      });
    }
      test(`${backend.name}: a queued stage (waiting for a worker) is tallied apart from running ones, and moves on to running`, async () => {
      const j = await backend.open(makeTempDir("atomic-views-q-"));
      open.push(j);
      const { rootId, lease } = await startRoot(j, "queued");
      await append(j, lease, rootId, [
        { type: "step_started", key: "0", payload: {}, stage: stage("0", "queued") },
        { type: "step_started", key: "1", payload: {}, stage: stage("1", "queued") },
        { type: "step_started", key: "2", payload: {}, stage: stage("2", "queued") },
        { type: "stage_running", payload: {}, stage: stage("0", "running") },
      ]);
      expect(shape(await j.views.stageTallies([rootId]), rootId)).toEqual(["queued/-/running x2", "running/-/running x1"]);
    });

    if (backend.readSchemaVersion) {
      test(`${backend.name}: a version 6 journal migrates to a stage index that takes queued stages, keeping its rows and index`, async () => {
        const dir = makeTempDir("atomic-mig7-");
        const db = await sqliteAtVersion(dir, 6);
        const rootId = insertOldRoot(db, "running", 0);
        db.run(
          `insert into stage_index (root_id, run_id, stage_key, path, name, kind, state, attempt, updated_at, outcome, input_tokens, cost_micro_usd, turns, has_usage)
           values (?, ?, '0', 'a', 'a', 'stage', 'finished', 2, 1, 'completed', 7, 9, 1, 1), (?, ?, '1', 'b', 'b', 'stage', 'running', 1, 1, null, 0, 0, 0, 0)`,
          [rootId, rootId, rootId, rootId],
        );
        expect(() => db.run("update stage_index set state = 'queued' where stage_key = '1'")).toThrow(/CHECK constraint/);
        db.close();

        const j = await backend.open(dir);
        open.push(j);
        expect(backend.readSchemaVersion!(dir)).toBe(LATEST_SCHEMA_VERSION);
        expect(shape(await j.views.stageTallies([rootId]), rootId)).toEqual(["finished/completed/running x1 in=7 cost=9 turns=1", "running/-/running x1"]);
        await j.close();
        open.pop();
        const raw = new Database(join(dir, JOURNAL_FILE));
        try {
          raw.run("update stage_index set state = 'queued' where stage_key = '1'");
          expect(() => raw.run("update stage_index set state = 'waiting' where stage_key = '1'")).toThrow(/CHECK constraint/);
          expect(raw.query<{ n: number }, []>("select count(*) as n from sqlite_master where name = 'stage_index_by_path'").get()!.n).toBe(1);
          expect(raw.query("pragma foreign_key_check").all()).toEqual([]);
        } finally {
          raw.close();
        }
      });
    }
  });
}
