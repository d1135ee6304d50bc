/**
 * What only the Postgres journal has, below the Journal interface: schemas
 * (`?schema=`, default `atomic`) that keep installations apart, a schema
 * written by a newer atomic refused and left untouched, a schema holding
 * someone else's tables refused, an older schema migrated with its runs
 * kept (and their origins filled from their events), the migration lock, lease expiry judged by
 * the database's clock (a process whose clock runs two hours ahead cannot
 * take a live lease), a remote holder never presumed dead, sslmode=prefer
 * on one connection (with and without TLS on the server), batch receipts
 * that make a repeated append call write nothing twice, version 5's
 * append functions replaced in place (migration 8), and the change
 * clock's commit order. A real cluster the tests start (test/helpers/
 * postgres.ts); each test in databases or schemas of its own.
 */

import { afterAll, afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { connect, createServer, type AddressInfo, type Socket } from "node:net";
import { openJournal } from "../../src/journal/open.ts";
import { probePostgres } from "../../src/journal/postgres/postgres-journal.ts";
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from "../../src/journal/postgres/migrations.ts";
import { APPEND_EVENT_SQL } from "../../src/journal/postgres/append-sql-v8.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { AtomicError, LeaseHeldError } from "../../src/shared/errors.ts";
import { newRunId, type HolderId } from "../../src/shared/ids.ts";
import { freshDatabase, postgresInstalled, startCluster } from "../helpers/postgres.ts";
import { untilSomeoneWaitsForLock } from "../helpers/pg-lock-wait.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { removeStaleFaketimeSegments } from "../helpers/faketime.ts";
import { liveHolder, startRoot } from "./backends.ts";
import { ENTRY_POINTS } from "../../src/shared/entry-points.ts";

const ROOT = join(import.meta.dir, "..", "..");
const LOCAL_BUN = join(ROOT, "node_modules", ".bin", "bun");
const BUN = existsSync(LOCAL_BUN) ? LOCAL_BUN : process.execPath;
const PROBE = join(ROOT, "test", "helpers", "pg-lease-probe.ts");
const FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

const journals: Journal[] = [];
const pools: pg.Pool[] = [];
afterEach(async () => {
  for (const j of journals.splice(0)) await j.close();
  removeTempDirs();
  removeStaleFaketimeSegments();
});
afterAll(async () => {
  for (const p of pools.splice(0)) await p.end();
});

async function open(url: string): Promise<Journal> {
  const j = await openJournal({ home: makeTempDir(), durability: "full", journalUrl: url });
  journals.push(j);
  return j;
}

/** Superuser connections to the database of `url` (its parameters dropped), search_path `atomic`. */
function sql(url: string): pg.Pool {
  const u = new URL(url);
  u.search = "";
  const pool = new pg.Pool({ connectionString: u.toString(), max: 2, options: "-c search_path=atomic" });
  pools.push(pool);
  return pool;
}

function withSchema(url: string, schema: string): string {
  const u = new URL(url);
  u.searchParams.set("schema", schema);
  return u.toString();
}

/** A TCP proxy to 127.0.0.1:`port` that counts the connections it accepted. */
async function countingProxy(port: number): Promise<{ port: number; accepted(): number; close(): void }> {
  let accepted = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    accepted++;
    const upstream = connect({ host: "127.0.0.1", port });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => sockets.delete(s));
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    accepted: () => accepted,
    close() {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

async function expectCode(promise: Promise<unknown>, code: string): Promise<AtomicError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AtomicError);
  expect((err as AtomicError).code).toBe(code);
  return err as AtomicError;
}

describe.skipIf(!postgresInstalled())("postgres journal", () => {
  test("postgres: the journal lives in the schema `atomic` by default; ?schema= keeps another installation apart", async () => {
    const db = await freshDatabase();
    const a = await open(db);
    const b = await open(withSchema(db, "team_b"));
    const { rootId } = await startRoot(a, "in-a");
    expect(await a.getRun(rootId)).toBeDefined();
    expect(await b.getRun(rootId)).toBeUndefined();
    expect(await b.countRuns()).toBe(0);
    const schemas = (await sql(db).query<{ schemaname: string }>("select distinct schemaname from pg_tables where tablename = 'runs' order by 1")).rows;
    expect(schemas.map((r) => r.schemaname)).toEqual(["atomic", "team_b"]);
    expect(a.location).not.toContain(new URL(db).password);
    expect(a.location).toBe(`postgres://postgres@${new URL(db).host}${new URL(db).pathname}`);
  });

  test("postgres: a schema written by a newer atomic is refused and left untouched", async () => {
    const db = await freshDatabase();
    const first = await open(db);
    await startRoot(first, "old");
    await first.close();
    journals.pop();
    const admin = sql(db);
    await admin.query("update atomic.meta set value = '999' where key = 'schema_version'");
    const before = (await admin.query("select count(*)::int as n from atomic.runs")).rows[0];

    const err = await expectCode(open(db), "schema_too_new");
    expect(err.message).toContain("schema version 999");
    expect(err.message).not.toContain(new URL(db).password);
    expect(err.hint).toBe("upgrade atomic, or name another schema in the journal URL (?schema=NAME)");
    expect(err.exitCode).toBe(2);
    expect((await admin.query("select value from atomic.meta where key = 'schema_version'")).rows[0]).toEqual({ value: "999" });
    expect((await admin.query("select count(*)::int as n from atomic.runs")).rows[0]).toEqual(before);
  });

  test("postgres: a version 2 schema (before retention and schedules) migrates to the latest, its runs kept; gc and schedules work on it", async () => {
    const db = await freshDatabase();
    const first = await open(db);
    const { rootId, lease } = await startRoot(first, "old");
    await first.append(lease, [{ runId: rootId, type: "status_changed", payload: {}, patch: { status: "completed", endedAt: Date.now() } }]);
    await first.releaseLease(lease);
    await first.close();
    journals.pop();
    const admin = sql(db);
    // What version 2 had: no tombstones, no schedules, no index of work operations by item, no artifact store (7).
    await admin.query("drop table atomic.schedules; drop table atomic.run_tombstones; drop index atomic.work_ops_by_work; drop table atomic.artifact_chunks; drop table atomic.artifact_files");
    // ... nor worker hosts (version 6).
    await admin.query(
      "alter table atomic.work_items drop column queue, drop column protocol; drop index atomic.work_leased_by_expiry; " +
        "drop table atomic.worker_hosts, atomic.fleet_up, atomic.fleet_down, atomic.fleet_holds",
    );
    // ... nor pinned code (version 11), nor run tags (14), nor run origins (16): its run's start says the API started it.
    await admin.query("drop table atomic.code_files; drop table atomic.run_tags");
    await admin.query(
      "drop trigger runs_origin_from_event on atomic.events; drop function atomic.runs_origin_from_event(); " +
        "drop index atomic.runs_roots_by_origin, atomic.runs_roots_recovered; alter table atomic.runs drop column origin, drop column recovered",
    );
    await admin.query(`update atomic.events set payload = '{"startedBy":"api"}' where run_id = $1 and seq = 1`, [rootId]);
    await admin.query("update atomic.meta set value = '2' where key = 'schema_version'");

    const j = await open(db);
    expect((await admin.query("select value from atomic.meta where key = 'schema_version'")).rows[0]).toEqual({ value: String(LATEST_SCHEMA_VERSION) });
    expect((await j.getRun(rootId))?.status).toBe("completed");
    expect((await j.listRuns({ origin: "api" })).map((r) => [r.id, r.origin, r.recovered])).toEqual([[rootId, "api", false]]);
    const before = (await j.views.changesSince(0, 10)).at(-1)!.change;
    expect((await j.retention.deleteTree(rootId, () => true))?.runIds).toEqual([rootId]);
    expect((await j.views.changesSince(before, 10)).map((c) => [c.id, c.deleted])).toEqual([[rootId, true]]);
    const schedule = { name: "n", cron: "0 3 * * *", timezone: null, workflow: "builtin:x", inputs: {}, cwd: "/", overlap: "skip", catchUp: "skip", createdAt: 1 } as const;
    expect(await j.schedules.add(schedule)).toBe(true);
    expect((await j.schedules.list()).map((x) => x.name)).toEqual(["n"]);
    expect(await j.code.sweep(Date.now())).toBe(0);
    const { rootId: tagged } = await startRoot(j, "tagged");
    await j.tags.set(tagged, { team: "search" }, 1);
    expect(await j.countRuns({ tags: { team: "search" } })).toBe(1);
  });

  test("postgres: a schema holding another program's tables is refused, nothing added to it", async () => {
    const db = await freshDatabase();
    const admin = sql(db);
    await admin.query("create schema atomic; create table atomic.invoices (id int)");
    const err = await expectCode(open(db), "storage_corrupt");
    expect(err.message).toBe("the schema atomic holds tables that are not an atomic journal");
    expect((await admin.query("select tablename from pg_tables where schemaname = 'atomic'")).rows).toEqual([{ tablename: "invoices" }]);
  });

  test("postgres: eight processes opening a fresh database at once migrate it once, without errors", async () => {
    const db = await freshDatabase();
    const home = makeTempDir();
    const procs = Array.from({ length: 8 }, () =>
      Bun.spawn([BUN, PROBE, home, newRunId(), "60000"], { env: { ...process.env, ATOMIC_JOURNAL: db }, stdout: "pipe", stderr: "pipe" }),
    );
    const outs = await Promise.all(procs.map(async (p) => ({ code: await p.exited, out: await new Response(p.stdout).text(), err: await new Response(p.stderr).text() })));
    for (const o of outs) {
      expect(o.err).toBe("");
      expect(JSON.parse(o.out)).toMatchObject({ taken: true, epoch: 1 });
    }
    const admin = sql(db);
    expect((await admin.query("select value from atomic.meta")).rows).toEqual([{ value: String(LATEST_SCHEMA_VERSION) }]);
  });

  test.skipIf(!existsSync(FAKETIME))("postgres: lease expiry is judged by the database clock, not by the taker's (two hours ahead)", async () => {
    const db = await freshDatabase();
    const j = await open(db);
    const root = newRunId();
    // Held by a process of "another host" (its pid means nothing here), for 60 s by the database's clock.
    await j.acquireLease(root, { holderId: "far-1" as HolderId, host: "elsewhere/m/b/1", pid: 1, pidStart: 1 }, { timeoutMs: 60_000 });
    const probe = Bun.spawn([BUN, PROBE, makeTempDir(), root, "60000"], {
      env: { ...process.env, ATOMIC_JOURNAL: db, LD_PRELOAD: FAKETIME, FAKETIME: "+2h", FAKETIME_DONT_RESET: "1" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [out] = await Promise.all([new Response(probe.stdout).text(), probe.exited]);
    const result = JSON.parse(out) as { taken: boolean; code?: string; now: number };
    expect(result.now - Date.now()).toBeGreaterThan(3_600_000); // the probe's clock really was ahead
    expect(result).toMatchObject({ taken: false, code: "lease_held" });

    // Once the lease has expired by the database clock, anyone takes it over.
    const short = newRunId();
    const brief = await j.acquireLease(short, { holderId: "far-2" as HolderId, host: "elsewhere/m/b/1", pid: 1, pidStart: 1 }, { timeoutMs: 1 });
    const clock = sql(db);
    const dbNow = async () => Number((await clock.query<{ now: string }>("select (extract(epoch from clock_timestamp()) * 1000)::bigint as now")).rows[0]!.now);
    await waitUntil(async () => (await dbNow()) > brief.renewedAt + brief.timeoutMs, 10_000, "the lease to expire by the database clock");
    expect((await j.acquireLease(short, liveHolder(), { timeoutMs: 60_000 })).epoch).toBe(2);
  });

  test("postgres: a user who may only read opens the journal and lists its runs", async () => {
    const db = await freshDatabase();
    const j = await open(db);
    const { rootId } = await startRoot(j, "readable");
    const admin = sql(db);
    const role = `reader_${process.pid}_${Date.now() % 100000}`;
    await admin.query(`create role ${role} login password 'reader-password-1'; grant usage on schema atomic to ${role}; grant select on all tables in schema atomic to ${role}`);
    try {
      const u = new URL(db);
      u.username = role;
      u.password = "reader-password-1";
      const reader = await open(u.toString());
      expect((await reader.listRuns()).map((r) => r.id)).toEqual([rootId]);
      await reader.close();
      journals.pop();
    } finally {
      await admin.query(`drop owned by ${role}; drop role ${role}`);
    }
  });

  test("postgres: a holder on another host is never presumed dead, whatever its pid", async () => {
    const db = await freshDatabase();
    const j = await open(db);
    const root = newRunId();
    const gone = Bun.spawn(["true"]);
    await gone.exited;
    await j.acquireLease(root, { holderId: "remote" as HolderId, host: "another-host/x/y/1", pid: gone.pid, pidStart: 0 }, { timeoutMs: 3_600_000 });
    const err = await j.acquireLease(root, liveHolder(), { timeoutMs: 60_000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LeaseHeldError);
  });

  test("postgres: an acquire waits for an append holding the lease row, then fences it", async () => {
    const db = await freshDatabase();
    const j = await open(db);
    const { rootId, lease } = await startRoot(j, "fenced");
    const admin = sql(db);
    // Another session holds the lease row as an in-flight append does (FOR SHARE, to its commit).
    const holder = await admin.connect();
    try {
      await holder.query("begin");
      await holder.query("select 1 from atomic.leases where run_id = $1 for share", [rootId]);
      let settled = false;
      const takeover = j.acquireLease(rootId, liveHolder("thief"), { timeoutMs: 60_000, force: true }).finally(() => {
        settled = true;
      });
      await untilSomeoneWaitsForLock(admin);
      expect(settled).toBe(false); // blocked on the row
      await holder.query("commit");
      expect((await takeover).epoch).toBe(lease.epoch + 1);
    } finally {
      holder.release();
    }
    const err = await j.append(lease, [{ runId: rootId, type: "late", payload: {} }]).catch((e: unknown) => e);
    expect((err as AtomicError).code).toBe("lease_lost");
  });

  test("postgres: an append batch sent again (a retry after a lost COMMIT) writes nothing twice; its receipt holds the first outcomes", async () => {
    const db = await freshDatabase();
    const j = await open(db);
    const { rootId, lease } = await startRoot(j, "receipts");
    const admin = sql(db);
    const receipt = async (batch: string) => (await admin.query<{ o: unknown }>("select outcomes::jsonb as o from append_batches where id = $1", [batch])).rows[0]?.o;
    const state = (err: unknown) => (err as { code?: string }).code;
    // Through the function (any batch) and through the one-statement append of a lone event.
    const entries = JSON.stringify([{ run: rootId, type: "checkpoint", key: "k", payload: '{"n":1}' }]);
    const call = () => admin.query<{ o: unknown }>("select append_entries($1, $2, $3, 'batch-1', null, 0, $4::jsonb, false) as o", [rootId, lease.holderId, lease.epoch, entries]);
    const first = (await call()).rows[0]!.o;
    expect(first).toEqual([{ status: "appended", seq: 2 }]);
    expect(state(await call().catch((e: unknown) => e))).toBe("23505");
    expect(await receipt("batch-1")).toEqual(first);
    const event = () => admin.query<{ seq: string | null }>(APPEND_EVENT_SQL, [rootId, lease.holderId, lease.epoch, "batch-2", null, rootId, "checkpoint", "k2", '{"n":2}', 5, 5]);
    const row = (await event()).rows[0]!;
    expect(Number(row.seq)).toBe(3);
    expect(state(await event().catch((e: unknown) => e))).toBe("23505");
    expect(await receipt("batch-2")).toEqual([{ status: "appended", seq: 3 }]);
    expect((await j.readEvents(rootId)).map((e) => e.seq)).toEqual([1, 2, 3]);
    expect((await j.getRun(rootId))?.lastSeq).toBe(3);
  });

  test("postgres: a version 5 schema migrates to the new append functions in place: runs, events and change numbers kept, appends go on gapless", async () => {
    const db = await freshDatabase();
    const admin = sql(db);
    // Version 5 as a version-5 atomic left it, with a run it wrote through its own append function.
    const c = await admin.connect();
    try {
      await c.query("begin");
      await c.query("create schema atomic");
      for (const m of MIGRATIONS.filter((x) => x.version <= 5)) for (const statement of m.statements) await c.query(statement);
      await c.query("insert into meta (key, value) values ('schema_version', '5')");
      await c.query("commit");
    } finally {
      c.release();
    }
    const rootId = newRunId();
    await admin.query("insert into leases (run_id, holder_id, host, pid, pid_start, epoch, renewed_at, timeout_ms) values ($1, 'v5', 'gone', 1, 1, 1, 0, 1)", [rootId]);
    const newRun = { rootId, parentId: null, parentKey: null, depth: 0, workflowName: "old", workflowPath: "/old.ts", workflowDigest: "d", inputs: "{}" };
    const written = [
      { run: rootId, type: "run_started", payload: "{}", newRun },
      { run: rootId, type: "checkpoint", key: "0", payload: '{"n":0}' },
    ];
    await admin.query("select append_entries($1, 'v5', 1, 'b5', null, 1000, $2::jsonb, false)", [rootId, JSON.stringify(written)]);
    const before = (await admin.query<{ change_seq: number }>("select change_seq::int from runs where id = $1", [rootId])).rows[0]!.change_seq;
    expect(before).toBeGreaterThan(0);

    const j = await open(db);
    expect((await admin.query("select value from meta where key = 'schema_version'")).rows[0]).toEqual({ value: String(LATEST_SCHEMA_VERSION) });
    // The new append_entry (its extra argument) replaced the old one; nothing else changed.
    expect((await admin.query("select pronargs from pg_proc where proname = 'append_entry'")).rows).toEqual([{ pronargs: 5 }]);
    expect((await j.readEvents(rootId)).map((e) => [e.seq, e.type, e.payload])).toEqual([
      [1, "run_started", {}],
      [2, "checkpoint", { n: 0 }],
    ]);
    expect((await j.getRun(rootId))?.lastSeq).toBe(2);
    const cursor = (await j.views.changesSince(0, 10)).at(-1)!.change;
    expect(cursor).toBe(before);

    // The old holder's lease expired long ago: taken over, then appended to through both paths.
    const lease = await j.acquireLease(rootId, liveHolder("new"), { timeoutMs: 60_000 });
    expect(lease.epoch).toBe(2);
    expect(await j.append(lease, [{ runId: rootId, type: "checkpoint", key: "1", payload: { n: 1 } }])).toEqual([{ status: "appended", seq: 3 }]);
    const outcomes = await j.append(lease, [
      { runId: rootId, type: "checkpoint", key: "2", payload: { n: 2 } },
      { runId: rootId, type: "status_changed", payload: {}, patch: { status: "completed", endedAt: 7 } },
    ]);
    expect(outcomes).toEqual([
      { status: "appended", seq: 4 },
      { status: "appended", seq: 5 },
    ]);
    expect((await j.readEvents(rootId)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    const run = await j.getRun(rootId);
    expect([run?.lastSeq, run?.status, run?.endedAt]).toEqual([5, "completed", 7]);
    const changes = await j.views.changesSince(cursor, 10);
    expect(changes.map((x) => [x.id, x.lastSeq])).toEqual([[rootId, 5]]);
  });

  test("postgres: sslmode=prefer (the default) connects in the clear to a server without TLS (after one refused try) and over TLS to one with it", async () => {
    const plain = new URL(await freshDatabase());
    const cluster = await startCluster({ tls: true });
    try {
      const tls = new URL(cluster.adminUrl);
      for (const [url, over] of [[plain, false], [tls, true]] as const) {
        const proxy = await countingProxy(Number(url.port));
        try {
          const via = new URL(url);
          via.port = String(proxy.port);
          const probe = await probePostgres(via.toString());
          expect([probe.ok, probe.detail.includes("over TLS")]).toEqual([true, over]);
          const j = await open(via.toString());
          const { rootId } = await startRoot(j, "tls");
          expect((await j.readEvents(rootId)).length).toBe(1);
          await j.close();
          // The probe's connection and the journal's: one each, plus one refused TLS try each where the server has no TLS.
          expect(proxy.accepted()).toBe(over ? 2 : 4);
        } finally {
          proxy.close();
        }
      }
    } finally {
      cluster.stop();
    }
  });

  test("postgres: the journal's bundle holds no Kysely: run listings load it in a bundle of their own, on first use", async () => {
    const outdir = makeTempDir("atomic-bundles-");
    const built = await Bun.build({ entrypoints: ENTRY_POINTS.map((f) => join(ROOT, "src", f)), outdir, root: join(ROOT, "src"), target: "bun", format: "esm",
      // As scripts/build.ts: ink's optional devtools import is not installed and never loaded.
      external: ["react-devtools-core"] });
    expect(built.success).toBe(true);
    const kysely = (entry: string) => readFileSync(join(outdir, entry.replace(/\.ts$/, ".js")), "utf8").includes("SelectQueryBuilderImpl");
    expect([kysely("journal/postgres/postgres-journal.ts"), kysely("journal/postgres/pg-listings.ts")]).toEqual([false, true]);
    // Listings still work through it.
    const j = await open(await freshDatabase());
    const { rootId } = await startRoot(j, "listed");
    expect((await j.listRuns()).map((r) => r.id)).toEqual([rootId]);
    expect(await j.countRuns()).toBe(1);
    expect((await j.findRuns(rootId.slice(0, 8), 5)).map((r) => r.id)).toEqual([rootId]);
    expect((await j.getRun(rootId))?.workflowName).toBe("listed");
  });

  test("postgres: change numbers follow commit order across concurrent appenders", async () => {
    const db = await freshDatabase();
    const j = await open(db);
    const roots = await Promise.all(Array.from({ length: 6 }, (_, i) => startRoot(j, `r${i}`)));
    let cursor = (await j.views.changesSince(0, 1000)).at(-1)!.change;
    const seen: string[] = [];
    const writers = roots.map(async ({ rootId, lease }) => {
      // Each with a patch: a plain append takes no change number (JournalViews.changesSince).
      for (let i = 0; i < 20; i++) await j.append(lease, [{ runId: rootId, type: "tick", payload: { i }, patch: { status: "running" } }]);
    });
    let done = false;
    const all = Promise.all(writers).finally(() => {
      done = true;
    });
    // A reader paging from its cursor while the writers run sees every run's last change.
    const last = new Map<string, number>();
    while (!done || seen.length === 0) {
      for (const c of await j.views.changesSince(cursor, 50)) {
        expect(c.change).toBeGreaterThan(cursor);
        cursor = c.change;
        seen.push(c.id);
        last.set(c.id, c.lastSeq);
      }
    }
    await all;
    for (const c of await j.views.changesSince(cursor, 1000)) last.set(c.id, c.lastSeq);
    for (const { rootId } of roots) expect(last.get(rootId)).toBe(21);
  });
});
