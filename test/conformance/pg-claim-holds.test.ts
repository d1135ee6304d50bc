/**
 * Claim holds of the shared (Postgres) journal, by root and kind
 * (src/journal/fleet.ts): what worker hosts' claims and a root's own pool
 * pass over, against a real database. Only the Postgres journal has worker
 * hosts, so only it has holds (its migration 15; SQLite has none to test).
 * - A host's commit of a budgeted result holds its root (`result:<work id>`)
 *   in the commit's own statement: the claim chained onto that commit, a
 *   second host's claim and the root's own pool pass over the root's items
 *   and take another root's; a commit by the root's own worker holds nothing.
 * - The root counting it lifts the hold; counted with the budget used up,
 *   the `spent` hold replaces it in the same statement; pausing and
 *   unpausing leave `spent` alone; a new drive's `releaseHolds(budget)`
 *   lifts it, keeping a pause; a result hold older than RESULT_HOLD_MS holds
 *   nothing.
 * - A version 14 journal (holds without a kind) migrates to 15: its pause is
 *   kept as a `paused` hold.
 */

import { afterEach, describe, expect, test } from "bun:test";
import pg from "pg";
import type { AppendEntry } from "../../src/journal/append.ts";
import type { FleetStore } from "../../src/journal/fleet.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { openJournal } from "../../src/journal/open.ts";
import { LATEST_SCHEMA_VERSION } from "../../src/journal/postgres/migrations.ts";
import { RESULT_HOLD_MS } from "../../src/journal/postgres/work-queue.ts";
import type { Lease } from "../../src/journal/runs.ts";
import type { HostClaimScope, WorkFence, WorkItem } from "../../src/journal/work-queue.ts";
import { POOL_PROTOCOL_VERSION } from "../../src/pool/protocol/common.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { freshDatabase } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, startRoot } from "./backends.ts";

const postgres = BACKENDS.find((b) => b.name === "postgres");
const LEASE_MS = 60_000;
const HOST: HostClaimScope = { queues: ["default"], protocol: POOL_PROTOCOL_VERSION };

const open: Journal[] = [];
const pools: pg.Pool[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  for (const p of pools.splice(0)) await p.end();
  removeTempDirs();
});

async function journalAt(url: string): Promise<Journal & { fleet: FleetStore }> {
  const journal = await openJournal({ home: makeTempDir("atomic-pg-holds-"), durability: "normal", journalUrl: url });
  open.push(journal);
  return journal as Journal & { fleet: FleetStore };
}

function admin(url: string): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  pools.push(pool);
  return pool;
}

/** Enqueues stage items on a root, as a drive of a run with a spending limit does (`budgeted`). */
async function enqueue(journal: Journal, lease: Lease, rootId: RunId, ids: string[], budgeted = true): Promise<void> {
  const entries: AppendEntry[] = ids.map((id) => ({
    runId: rootId,
    type: "step_started",
    key: `k-${id}`,
    payload: { id },
    durable: false,
    work: { id, stageKey: `k-${id}`, attempt: 1, descriptor: { command: `echo ${id}`, protocol: POOL_PROTOCOL_VERSION, ...(budgeted ? { budgeted: true } : {}) } },
  }));
  await journal.append(lease, entries);
}

const fenceOf = (w: WorkItem): WorkFence => ({ id: w.id, workerId: w.workerId!, generation: w.generation, epoch: w.epoch });
const done = (w: WorkItem) => [fenceOf(w), { state: "completed" as const, result: { ok: true } }, { id: `op-${w.id}`, digest: "d" }] as const;

describe.if(postgres !== undefined)("postgres: claim holds", () => {
  test("postgres: a host's budgeted result holds its root's items from every claim until the root counts it; spent holds until a new drive; stale result holds do not", async () => {
    const url = await freshDatabase("holds");
    const j = await journalAt(url);
    const a = await startRoot(j, "a");
    const b = await startRoot(j, "b");
    await enqueue(j, a.lease, a.rootId, ["a1", "a2", "a3", "a4", "a5"]);
    await enqueue(j, b.lease, b.rootId, ["b1", "b2", "b3"]);

    // Host h1 runs a1; its commit claims its next item in the same statement: b1, not a2 (the result's hold).
    const a1 = (await j.work.claim("w1@h1", LEASE_MS, HOST))!;
    expect(a1.id).toBe("a1");
    const after = await j.work.completeAndClaim(...done(a1), { leaseMs: LEASE_MS, root: HOST });
    expect(after.receipt.status).toBe("committed");
    expect(after.next?.id).toBe("b1");
    // Another host, and the root's own pool, pass over a's items too.
    expect((await j.work.claim("w2@h2", LEASE_MS, HOST))?.id).toBe("b2");
    expect(await j.work.claim("own-1", LEASE_MS, { rootId: a.rootId, epoch: a.lease.epoch })).toBeUndefined();

    // Counted: claims go on.
    await j.fleet.budgetCounted(a.rootId, "a1", false);
    const a2 = (await j.work.claim("w2@h2", LEASE_MS, HOST))!;
    expect(a2.id).toBe("a2");

    // Counted with the budget used up: `spent` holds, whatever pausing and unpausing do.
    await j.work.complete(...done(a2));
    expect((await j.work.claim("w2@h2", LEASE_MS, HOST))?.id).toBe("b3");
    await j.fleet.budgetCounted(a.rootId, "a2", true);
    await j.fleet.hold(a.rootId, true);
    await j.fleet.hold(a.rootId, false);
    expect(await j.work.claim("w2@h2", LEASE_MS, HOST)).toBeUndefined();
    expect(await j.work.claim("own-1", LEASE_MS, { rootId: a.rootId, epoch: a.lease.epoch })).toBeUndefined();

    // A new drive of the root lifts the budget's holds and keeps a pause.
    await j.fleet.hold(a.rootId, true);
    await j.fleet.releaseHolds(a.rootId, "budget");
    expect(await j.work.claim("w2@h2", LEASE_MS, HOST)).toBeUndefined();
    expect((await j.work.claim("own-1", LEASE_MS, { rootId: a.rootId, epoch: a.lease.epoch }))?.id).toBe("a3");
    await j.fleet.hold(a.rootId, false);
    const a4 = (await j.work.claim("w2@h2", LEASE_MS, HOST))!;
    expect(a4.id).toBe("a4");

    // A result hold nobody lifts holds for RESULT_HOLD_MS only (by the database clock).
    await j.work.complete(...done(a4));
    expect(await j.work.claim("w2@h2", LEASE_MS, HOST)).toBeUndefined();
    const db = admin(url);
    await db.query("update atomic.fleet_holds set at = at - $1 where kind = 'result:a4'", [RESULT_HOLD_MS + 1]);
    expect((await j.work.claim("w2@h2", LEASE_MS, HOST))?.id).toBe("a5");
  });

  test("postgres: commits that hold nothing: the root's own worker's, and a host's of a run without a spending limit", async () => {
    const url = await freshDatabase("holds");
    const j = await journalAt(url);
    const a = await startRoot(j, "a");
    await enqueue(j, a.lease, a.rootId, ["a1", "a2"]);
    const own = (await j.work.claim("own-1", LEASE_MS, { rootId: a.rootId, epoch: a.lease.epoch }))!;
    expect((await j.work.completeAndClaim(...done(own), { leaseMs: LEASE_MS, root: HOST })).next?.id).toBe("a2");
    const c = await startRoot(j, "c");
    await enqueue(j, c.lease, c.rootId, ["c1", "c2"], false);
    const c1 = (await j.work.claim("w1@h1", LEASE_MS, HOST))!;
    expect((await j.work.completeAndClaim(...done(c1), { leaseMs: LEASE_MS, root: HOST })).next?.id).toBe("c2");
    expect((await admin(url).query("select count(*)::int as n from atomic.fleet_holds")).rows).toEqual([{ n: 0 }]);
  });

  test("postgres: a version 14 journal (holds without a kind) migrates to 15, its pause kept", async () => {
    const url = await freshDatabase("holds");
    const j0 = await journalAt(url);
    const a = await startRoot(j0, "a");
    await enqueue(j0, a.lease, a.rootId, ["a1"]);
    await j0.close();
    open.pop();
    // The holds table as version 14 left it, holding a pause of the root.
    const db = admin(url);
    await db.query("alter table atomic.fleet_holds drop constraint fleet_holds_pkey, drop column kind");
    await db.query("alter table atomic.fleet_holds add primary key (root_id)");
    await db.query("insert into atomic.fleet_holds (root_id, at) values ($1, 0)", [a.rootId]);
    // ...and without what later versions added (16: run origins on runs), so that every step from 14 runs again.
    await db.query("drop trigger runs_origin_from_event on atomic.events");
    await db.query("drop function atomic.runs_origin_from_event()");
    await db.query("alter table atomic.runs drop column origin, drop column recovered");
    await db.query("update atomic.meta set value = '14' where key = 'schema_version'");

    const j = await journalAt(url);
    expect((await db.query("select value from atomic.meta where key = 'schema_version'")).rows).toEqual([{ value: String(LATEST_SCHEMA_VERSION) }]);
    expect((await db.query("select root_id, kind from atomic.fleet_holds")).rows).toEqual([{ root_id: a.rootId, kind: "paused" }]);
    expect(await j.work.claim("w1@h1", LEASE_MS, HOST)).toBeUndefined();
    await j.fleet.hold(a.rootId, false);
    expect((await j.work.claim("w1@h1", LEASE_MS, HOST))?.id).toBe("a1");
  });
});
