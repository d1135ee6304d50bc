/**
 * Retention on every journal backend (RunRetention): candidates by stored
 * status and age; deleteTree removes a root, its child runs and every row
 * that refers to them (and nothing of other runs), keeps what `decide`
 * refuses, counts the same on a dry run (which changes nothing); reclaim
 * reports sizes; a deleted run is a change of its own (its tombstone), numbered
 * after every earlier change. On Postgres: a lease live by the database clock
 * keeps its run whatever `decide` says, and a takeover holding the lease row
 * while gc starts is waited for and seen.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { statSync, truncateSync } from "node:fs";
import type { Journal } from "../../src/journal/journal.ts";
import type { Lease } from "../../src/journal/runs.ts";
import { newRunId, type RunId } from "../../src/shared/ids.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, startRoot } from "./backends.ts";
import type { PostgresJournal } from "../../src/journal/postgres/postgres-journal.ts";
import { NOW_MS } from "../../src/journal/postgres/store-session.ts";
import { leaseLive } from "../../src/journal/run-status.ts";
import { waitUntil } from "../helpers/atomic.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

/** A finished root with a child run, a stage, a work item, a message, a prompt; its lease released. */
async function finishedTree(j: Journal, name: string): Promise<{ rootId: RunId; childId: RunId }> {
  const { rootId, lease } = await startRoot(j, name);
  const childId = newRunId();
  await j.append(lease, [
    { runId: rootId, type: "step_started", key: "0", payload: { kind: "child" }, stage: { key: "0", path: "kid", name: "kid", kind: "child", state: "running", attempt: 1, childRunId: childId } },
    {
      runId: childId,
      type: "run_started",
      payload: {},
      newRun: { rootId, parentId: rootId, parentKey: "0", depth: 1, workflowName: "kid", workflowPath: "/kid.ts", workflowDigest: "d", inputs: {} },
    },
    { runId: childId, type: "step_started", key: "0", payload: {}, work: { id: `w-${name}`, stageKey: "0", attempt: 1, descriptor: {} } },
    { runId: childId, type: "step_started", key: "1", payload: {}, prompt: { id: `p-${name}`, question: "ok?", choices: null, deadline: null } },
  ]);
  await j.messages.enqueue(
    { rootId, id: `m-${name}`, target: "kid", text: "hi", mode: "steer", sticky: false, sender: "cli", lookup: { paths: ["kid"] } },
    () => [{ stagePath: "kid" }],
  );
  await j.append(lease, [
    { runId: childId, type: "status_changed", payload: {}, patch: { status: "completed", endedAt: Date.now() } },
    { runId: rootId, type: "status_changed", payload: {}, patch: { status: "completed", endedAt: Date.now() } },
  ]);
  await j.releaseLease(lease);
  return { rootId, childId };
}

async function rowsOf(j: Journal, rootId: RunId, childId: RunId) {
  return {
    root: (await j.getRun(rootId)) !== undefined,
    child: (await j.getRun(childId)) !== undefined,
    events: (await j.readEvents(rootId)).length + (await j.readEvents(childId)).length,
    work: (await j.work.list(rootId)).length,
    stages: (await j.messages.stages(rootId)).length,
    messages: (await j.messages.messagesOf(rootId)).messages.length,
    prompts: (await j.messages.prompts(rootId)).length,
  };
}

for (const backend of BACKENDS) {
  describe(`${backend.name}: retention`, () => {
    test(`${backend.name}: deleteTree removes a tree and every row of it; a dry run counts the same and changes nothing; decide keeps`, async () => {
      const j = await backend.open(makeTempDir("atomic-retention-"));
      open.push(j);
      const a = await finishedTree(j, "a");
      const b = await finishedTree(j, "b");
      const full = await rowsOf(j, a.rootId, a.childId);
      expect(full).toEqual({ root: true, child: true, events: 7, work: 1, stages: 1, messages: 1, prompts: 1 });

      const later = Date.now() + 1000;
      const found = await j.retention.candidates({ statuses: ["completed"], before: later, limit: 10 });
      expect(found.map((r) => r.id).sort()).toEqual([a.rootId, b.rootId].sort());
      expect(await j.retention.candidates({ statuses: ["completed"], before: 0, limit: 10 })).toEqual([]);
      expect(await j.retention.candidates({ statuses: ["failed"], before: later, limit: 10 })).toEqual([]);
      const firstId = [a.rootId, b.rootId].sort()[0]!;
      expect((await j.retention.candidates({ statuses: ["completed"], before: later, limit: 10, afterId: firstId })).map((r) => r.id)).not.toContain(firstId);

      let seen: { status: string; lease: Lease | undefined } | undefined;
      expect(await j.retention.deleteTree(a.rootId, (root, lease) => ((seen = { status: root.status, lease }), false))).toBeUndefined();
      expect(seen).toEqual({ status: "completed", lease: undefined });
      expect(await rowsOf(j, a.rootId, a.childId)).toEqual(full);

      const dry = await j.retention.deleteTree(a.rootId, () => true, { dryRun: true });
      expect(await rowsOf(j, a.rootId, a.childId)).toEqual(full);
      const real = await j.retention.deleteTree(a.rootId, () => true);
      expect(real).toEqual(dry);
      expect(real!.runIds).toEqual([a.rootId, a.childId]);
      expect(real!.rows.runs).toBe(2);
      expect(real!.rows.events).toBe(7);
      expect(real!.rows.work_items).toBe(1);
      expect(await rowsOf(j, a.rootId, a.childId)).toEqual({ root: false, child: false, events: 0, work: 0, stages: 0, messages: 0, prompts: 0 });
      expect(await j.getLease(a.rootId)).toBeUndefined();
      // The other tree is whole.
      expect(await rowsOf(j, b.rootId, b.childId)).toEqual({ ...full });
      expect(await j.retention.deleteTree(a.rootId, () => true)).toBeUndefined();
      // A child run is not a tree of its own.
      expect(await j.retention.deleteTree(b.childId, () => true)).toBeUndefined();

      const reclaimed = await j.retention.reclaim({ rewrite: true });
      expect(reclaimed.bytesAfter).toBeGreaterThanOrEqual(0);
      expect(reclaimed.bytesAfter).toBeLessThanOrEqual(reclaimed.bytesBefore);
    });

    test(`${backend.name}: decide sees a live lease inside the transaction`, async () => {
      const j = await backend.open(makeTempDir("atomic-retention-"));
      open.push(j);
      const { rootId, lease } = await startRoot(j, "live");
      let seen: Lease | undefined;
      expect(await j.retention.deleteTree(rootId, (_root, l) => ((seen = l), false))).toBeUndefined();
      expect(seen?.epoch).toBe(lease.epoch);
      expect(seen?.holderId).toBe(lease.holderId);
    });

    test(`${backend.name}: a deleted run is a change numbered after every earlier one, and later changes are numbered after it`, async () => {
      const j = await backend.open(makeTempDir("atomic-retention-"));
      open.push(j);
      await finishedTree(j, "a");
      const b = await finishedTree(j, "b");
      const before = (await j.views.changesSince(0, 100)).at(-1)!.change;
      await j.retention.deleteTree(b.rootId, () => true);
      const gone = await j.views.changesSince(before, 100);
      expect(gone.map((c) => `${c.id} ${c.deleted === true} ${c.status}`)).toEqual([`${b.rootId} true completed`, `${b.childId} true completed`]);
      expect(gone[0]!.change).toBeGreaterThan(before);
      expect(gone[1]!.change).toBeGreaterThan(gone[0]!.change);
      const { rootId } = await startRoot(j, "later");
      const next = await j.views.changesSince(gone[1]!.change, 100);
      expect(next.map((c) => c.id)).toEqual([rootId]);
      expect(next[0]!.deleted).toBeUndefined();
    });
  });
}

describe("postgres: deleteTree judges the lease by the database clock", () => {
  const pg = BACKENDS.find((b) => b.name === "postgres");
  test("a run whose lease is live is kept even when decide says delete; one expired by the database clock is shown expired and goes", async () => {
    if (!pg) return;
    const j = await pg.open(makeTempDir("atomic-retention-"));
    open.push(j);
    const { rootId, lease } = await startRoot(j, "held");
    await j.append(lease, [{ runId: rootId, type: "status_changed", payload: {}, patch: { status: "completed", endedAt: Date.now() } }]);
    expect(await j.retention.deleteTree(rootId, () => true)).toBeUndefined();
    expect(await j.getRun(rootId)).toBeDefined();
    expect((await j.getLease(rootId))?.epoch).toBe(lease.epoch);
    // Renewed an hour ago by the database clock: expired, though its holder (this process) lives on another "host".
    const conn = (j as PostgresJournal).conn;
    await conn.query(`update leases set host = 'elsewhere', renewed_at = ${NOW_MS} - 3600000 where run_id = $1`, [rootId]);
    let shown: Lease | undefined;
    const deleted = await j.retention.deleteTree(rootId, (_root, l) => ((shown = l), !leaseLive(l)));
    expect(shown?.epoch).toBe(lease.epoch);
    expect(leaseLive(shown)).toBe(false);
    expect(deleted?.runIds).toEqual([rootId]);
    expect(await j.getRun(rootId)).toBeUndefined();
  });

  test("a takeover that holds the lease row while gc starts is seen by gc: it waits on the row and keeps the run", async () => {
    if (!pg) return;
    const j = await pg.open(makeTempDir("atomic-retention-"));
    open.push(j);
    const { rootId, lease } = await startRoot(j, "taken");
    await j.append(lease, [{ runId: rootId, type: "status_changed", payload: {}, patch: { status: "interrupted" } }]);
    await j.releaseLease(lease);
    // Another process resuming the run: its acquire holds the lease row while it decides.
    const resumer = await (j as PostgresJournal).conn.pool.connect();
    try {
      await resumer.query("begin");
      await resumer.query("select 1 from leases where run_id = $1 for update", [rootId]);
      let shown: Lease | undefined;
      const gc = j.retention.deleteTree(rootId, (_root, l) => ((shown = l), !leaseLive(l)));
      await waitUntil(async () => (await resumer.query("select count(*)::int as n from pg_locks where not granted")).rows[0].n > 0, 10_000, "gc to wait on the lease row");
      await resumer.query(`update leases set holder_id = 'resumer', epoch = epoch + 1, released = 0, renewed_at = ${NOW_MS} where run_id = $1`, [rootId]);
      await resumer.query("commit");
      expect(await gc).toBeUndefined();
      expect(shown?.holderId as string | undefined).toBe("resumer");
      expect((await j.getRun(rootId))?.status).toBe("interrupted");
    } finally {
      await resumer.query("rollback").catch(() => {});
      resumer.release();
    }
  });
});

describe("sqlite: the journal file shrunk by gc is not taken for a truncated one", () => {
  test("storageFault stays quiet after a vacuum shrinks the file, and names a truncation to part of a page", async () => {
    const dir = makeTempDir("atomic-retention-");
    const sqlite = BACKENDS.find((b) => b.name === "sqlite");
    if (!sqlite?.file) return;
    const j = await sqlite.open(dir);
    open.push(j);
    const other = await sqlite.open(dir); // another process's view: it did not do the vacuum
    open.push(other);
    const trees = [];
    for (let i = 0; i < 3; i++) {
      const { rootId, lease } = await startRoot(j, `big${i}`);
      await j.append(lease, Array.from({ length: 50 }, (_, n) => ({ runId: rootId, type: "checkpoint", key: String(n), payload: { blob: "x".repeat(20_000) } })));
      await j.append(lease, [{ runId: rootId, type: "status_changed", payload: {}, patch: { status: "completed", endedAt: Date.now() } }]);
      await j.releaseLease(lease);
      trees.push(rootId);
    }
    await j.retention.reclaim({ rewrite: false }); // checkpointed: the file holds it all
    expect(other.storageFault()).toBeUndefined();
    const grown = statSync(sqlite.file(dir)).size;
    for (const id of trees) await j.retention.deleteTree(id, () => true);
    const r = await j.retention.reclaim({ rewrite: false });
    expect(r.bytesAfter).toBeLessThan(r.bytesBefore);
    expect(statSync(sqlite.file(dir)).size).toBeLessThan(grown / 4);
    expect(other.storageFault()).toBeUndefined();
    expect(j.storageFault()).toBeUndefined();
    truncateSync(sqlite.file(dir), 1000);
    expect(other.storageFault()?.message).toContain("was truncated");
  });
});
