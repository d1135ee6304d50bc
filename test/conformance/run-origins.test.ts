/**
 * Run origins stored on the runs row (journal/run-origin-sql.ts; SQLite
 * migration 15, Postgres 16) on every journal backend: a run_started sets
 * how the run was started (its `origin.kind`, else `startedBy`, else a
 * schedule's id), a service's run_resumed that continued another drive
 * marks it recovered; the origin filter and RunRecord agree. And on SQLite,
 * a version 14 journal migrates with its runs' origins filled from their
 * events (the Postgres migration: postgres.test.ts).
 */

import { afterEach, describe, expect, test } from "bun:test";
import type { AppendEntry } from "../../src/journal/append.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { RUN_ORIGINS } from "../../src/journal/run-origin.ts";
import { LATEST_SCHEMA_VERSION } from "../../src/journal/sqlite/schema-version.ts";
import { newRunId, type RunId } from "../../src/shared/ids.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, liveHolder, sqlite, sqliteAtVersion } from "./backends.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

/** A run's first event payloads, by what they say of the run's origin; `then` the events after it. */
const CASES: Record<string, { id?: string; started: unknown; then?: [string, unknown][]; origins: string[] }> = {
  cli: { started: { startedBy: "cli" }, origins: ["cli"] },
  api: { started: { startedBy: "api" }, origins: ["api"] },
  schedule: { started: { startedBy: "schedule" }, origins: ["schedule"] },
  rerun: { started: { startedBy: "cli", origin: { kind: "rerun", runId: "r" } }, origins: ["rerun"] },
  fork: { started: { startedBy: "api", origin: { kind: "fork", runId: "r" } }, origins: ["fork"] },
  oldSchedule: { id: `sched-${newRunId()}`, started: {}, origins: ["schedule"] },
  unknown: { started: {}, origins: [] },
  // The service's first drive of a run left to it is no recovery; one that continues a step is.
  firstDrive: { started: { startedBy: "cli" }, then: [["run_resumed", { drivenBy: "service" }]], origins: ["cli"] },
  recovered: {
    started: { startedBy: "schedule" },
    then: [["checkpoint", {}], ["run_resumed", { drivenBy: "service" }], ["checkpoint", {}], ["run_resumed", { drivenBy: "service" }]],
    origins: ["schedule", "recovery"],
  },
  resumedByHand: { started: { startedBy: "api" }, then: [["checkpoint", {}], ["run_resumed", { drivenBy: "cli" }]], origins: ["api"] },
  forkCopied: { started: { startedBy: "cli", origin: { kind: "fork", runId: "r" } }, then: [["checkpoint", { reusedFrom: "r" }], ["run_resumed", { drivenBy: "service" }]], origins: ["fork"] },
};

/** Records every case as a root run in `j`; case name → run id. */
async function recordCases(j: Journal): Promise<Map<string, RunId>> {
  const ids = new Map<string, RunId>();
  for (const [name, c] of Object.entries(CASES)) {
    const rootId = (c.id ?? newRunId()) as RunId;
    const lease = await j.acquireLease(rootId, liveHolder(name), { timeoutMs: 60_000 });
    const newRun = { rootId, parentId: null, parentKey: null, depth: 0, workflowName: name, workflowPath: `/${name}.ts`, workflowDigest: "d", inputs: {} };
    const entries: AppendEntry[] = [{ runId: rootId, type: "run_started", payload: c.started, newRun }];
    for (const [type, payload] of c.then ?? []) entries.push({ runId: rootId, type, payload });
    await j.append(lease, entries);
    ids.set(name, rootId);
  }
  return ids;
}

/** Checks records and filters against CASES. */
async function expectOrigins(j: Journal, ids: Map<string, RunId>): Promise<void> {
  for (const [name, id] of ids) {
    const run = (await j.getRun(id))!;
    expect([name, [...(run.origin ? [run.origin] : []), ...(run.recovered ? ["recovery"] : [])]]).toEqual([name, CASES[name]!.origins]);
  }
  for (const origin of RUN_ORIGINS) {
    const want = [...ids].filter(([name]) => CASES[name]!.origins.includes(origin)).map(([, id]) => id).sort();
    expect([origin, (await j.listRuns({ origin })).map((r) => r.id).sort()]).toEqual([origin, want]);
    expect([origin, await j.countRuns({ origin })]).toEqual([origin, want.length]);
  }
  expect((await j.listRuns({ origin: "cli", workflowName: "firstDrive" })).map((r) => r.id)).toEqual([ids.get("firstDrive")!]);
}

for (const backend of BACKENDS) {
  describe(`${backend.name}: run origins`, () => {
    test(`${backend.name}: a run's start origin and recovery are stored as its events are appended, and filtered on`, async () => {
      const j = await backend.open(makeTempDir("atomic-origins-"));
      open.push(j);
      await expectOrigins(j, await recordCases(j));
    });
  });
}

describe("sqlite: run origins migration", () => {
  test("sqlite: a version 14 journal migrates with its runs' origins filled from their events, and keeps them up to date", async () => {
    const dir = makeTempDir("atomic-mig15-");
    const db = await sqliteAtVersion(dir, 14);
    const ids = new Map<string, RunId>();
    const run = db.prepare(
      `insert into runs (id, root_id, parent_id, depth, workflow_name, workflow_path, workflow_digest, inputs, status, created_at, updated_at, last_seq, control_ack)
       values (?, ?, null, 0, ?, '/old.ts', 'd', '{}', 'running', 1, 2, ?, 0)`,
    );
    const ev = db.prepare("insert into events (run_id, seq, type, key, payload, at) values (?, ?, ?, null, ?, 1)");
    for (const [name, c] of Object.entries(CASES)) {
      const id = (c.id ?? newRunId()) as RunId;
      const events: [string, unknown][] = [["run_started", c.started], ...(c.then ?? [])];
      run.run(id, id, name, events.length);
      events.forEach(([type, payload], i) => ev.run(id, i + 1, type, JSON.stringify(payload)));
      ids.set(name, id);
    }
    db.close();

    const j = await sqlite.open(dir);
    open.push(j);
    expect(sqlite.readSchemaVersion!(dir)).toBe(LATEST_SCHEMA_VERSION);
    await expectOrigins(j, ids);
    // A recovery of a run recorded before the migration is marked by the journal from then on.
    const old = ids.get("cli")!;
    const lease = await j.acquireLease(old, liveHolder("again"), { timeoutMs: 60_000 });
    await j.append(lease, [
      { runId: old, type: "checkpoint", payload: {} },
      { runId: old, type: "run_resumed", payload: { drivenBy: "service" } },
    ]);
    expect((await j.getRun(old))!.recovered).toBe(true);
  });
});
