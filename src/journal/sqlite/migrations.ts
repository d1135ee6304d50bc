/**
 * Versioned schema of the SQLite journal.
 *
 * The `meta` table holds `schema_version`; a database without any table is
 * version 0. `MIGRATIONS` lists every step in order; opening a journal
 * applies the pending ones in one IMMEDIATE transaction (two processes
 * opening a fresh home at once: the second waits, then finds nothing to do).
 *
 * A database whose version is newer than the newest migration here was
 * written by a newer atomic: it is refused with `schema_too_new` and never
 * altered — the check runs before any pragma that writes, and again inside
 * the migration transaction. A SQLite file that holds tables but no `meta`
 * belongs to another program and is refused as `storage_corrupt`.
 *
 * Migrations are append-only: never edit a released one, add the next.
 */

import type { Database } from "bun:sqlite";
import { sql, type Kysely } from "kysely";
import { StorageError } from "../../shared/errors.ts";

/** Migrations see an untyped database: the table types describe the newest schema only. */
type AnyDb = Kysely<Record<string, never>>;

interface Migration {
  version: number;
  name: string;
  up(db: AnyDb): Promise<void>;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "runs, events, leases",
    async up(db) {
      await db.schema
        .createTable("meta")
        .addColumn("key", "text", (c) => c.primaryKey())
        .addColumn("value", "text", (c) => c.notNull())
        .modifyEnd(sql`strict`)
        .execute();

      await db.schema
        .createTable("runs")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("root_id", "text", (c) => c.notNull())
        .addColumn("parent_id", "text", (c) => c.references("runs.id"))
        .addColumn("parent_key", "text")
        .addColumn("depth", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("workflow_name", "text", (c) => c.notNull())
        .addColumn("workflow_path", "text", (c) => c.notNull())
        .addColumn("workflow_digest", "text", (c) => c.notNull())
        .addColumn("inputs", "text")
        .addColumn("status", "text", (c) =>
          c
            .notNull()
            .check(sql`status in ('running', 'completed', 'failed', 'cancelled', 'blocked', 'interrupted')`),
        )
        .addColumn("outputs", "text")
        .addColumn("error", "text")
        .addColumn("created_at", "integer", (c) => c.notNull())
        .addColumn("updated_at", "integer", (c) => c.notNull())
        .addColumn("ended_at", "integer")
        .addColumn("last_seq", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("control", "text")
        .addColumn("control_rev", "integer", (c) => c.notNull().defaultTo(0))
        .modifyEnd(sql`strict`)
        .execute();
      // `runs` lists root runs newest first, optionally by status; `show` lists a run's children.
      await db.schema
        .createIndex("runs_roots_by_created")
        .on("runs")
        .columns(["created_at desc", "id desc"])
        .where(sql.ref("parent_id"), "is", null)
        .execute();
      await db.schema
        .createIndex("runs_roots_by_status")
        .on("runs")
        .columns(["status", "created_at desc", "id desc"])
        .where(sql.ref("parent_id"), "is", null)
        .execute();
      await db.schema
        .createIndex("runs_by_parent")
        .on("runs")
        .columns(["parent_id", "created_at desc", "id desc"])
        .where(sql.ref("parent_id"), "is not", null)
        .execute();

      // Clustered by (run_id, seq): replaying a run reads one contiguous key range.
      await db.schema
        .createTable("events")
        .addColumn("run_id", "text", (c) => c.notNull().references("runs.id").onDelete("cascade"))
        .addColumn("seq", "integer", (c) => c.notNull())
        .addColumn("type", "text", (c) => c.notNull())
        .addColumn("key", "text")
        .addColumn("idempotency_key", "text")
        .addColumn("payload", "text")
        .addColumn("at", "integer", (c) => c.notNull())
        .addPrimaryKeyConstraint("events_pk", ["run_id", "seq"])
        .modifyEnd(sql`strict, without rowid`)
        .execute();
      await db.schema
        .createIndex("events_idempotency")
        .unique()
        .on("events")
        .columns(["run_id", "idempotency_key"])
        .where(sql.ref("idempotency_key"), "is not", null)
        .execute();

      // No foreign key to runs: a lease is taken before the root run's first event creates it.
      await db.schema
        .createTable("leases")
        .addColumn("run_id", "text", (c) => c.primaryKey())
        .addColumn("holder_id", "text", (c) => c.notNull())
        .addColumn("host", "text", (c) => c.notNull())
        .addColumn("pid", "integer", (c) => c.notNull())
        .addColumn("pid_start", "integer", (c) => c.notNull())
        .addColumn("epoch", "integer", (c) => c.notNull())
        .addColumn("renewed_at", "integer", (c) => c.notNull())
        .addColumn("timeout_ms", "integer", (c) => c.notNull())
        .addColumn("released", "integer", (c) => c.notNull().defaultTo(0))
        .modifyEnd(sql`strict`)
        .execute();
    },
  },
  {
    version: 2,
    name: "work queue, control acknowledgements",
    async up(db) {
      await sql`alter table runs add column control_ack integer not null default 0`.execute(db);
      await db.schema
        .createTable("work_items")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("root_id", "text", (c) => c.notNull())
        .addColumn("run_id", "text", (c) => c.notNull())
        .addColumn("stage_key", "text", (c) => c.notNull())
        .addColumn("attempt", "integer", (c) => c.notNull())
        .addColumn("descriptor", "text", (c) => c.notNull())
        .addColumn("state", "text", (c) =>
          c.notNull().check(sql`state in ('ready', 'leased', 'completed', 'failed', 'abandoned')`),
        )
        .addColumn("generation", "integer", (c) => c.notNull().defaultTo(1))
        .addColumn("worker_id", "text")
        .addColumn("epoch", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("lease_expires_at", "integer")
        .addColumn("ready_at", "integer", (c) => c.notNull())
        .addColumn("created_at", "integer", (c) => c.notNull())
        .addColumn("updated_at", "integer", (c) => c.notNull())
        .addColumn("result", "text")
        .addColumn("error", "text")
        .modifyEnd(sql`strict`)
        .execute();
      // FIFO claims scan only ready rows (a partial index: STACK.md measured claims 2x slower without).
      await db.schema
        .createIndex("work_ready")
        .on("work_items")
        .columns(["ready_at", "id"])
        .where(sql.ref("state"), "=", "ready")
        .execute();
      await db.schema.createIndex("work_by_root").on("work_items").columns(["root_id", "state"]).execute();
      await db.schema
        .createTable("work_ops")
        .addColumn("op_id", "text", (c) => c.primaryKey())
        .addColumn("work_id", "text", (c) => c.notNull())
        .addColumn("digest", "text", (c) => c.notNull())
        .addColumn("receipt", "text", (c) => c.notNull())
        .addColumn("at", "integer", (c) => c.notNull())
        .modifyEnd(sql`strict`)
        .execute();
    },
  },
];

export const LATEST_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]?.version ?? 0;

/**
 * The schema version of an open database, read without writing anything.
 * Throws StorageError for a file that is not ours.
 */
export function readSchemaVersion(db: Database, path: string): number {
  const tables = db
    .query<{ name: string }, []>("select name from sqlite_master where type = 'table' and name not like 'sqlite_%'")
    .all()
    .map((r) => r.name);
  if (tables.length === 0) return 0;
  if (!tables.includes("meta")) {
    throw new StorageError("storage_corrupt", `the journal at ${path} is not an atomic database (it holds other tables)`, {
      hint: "move it away or point --home at another directory",
    });
  }
  const row = db
    .query<{ value: string }, []>("select value from meta where key = 'schema_version'")
    .get();
  return row ? Number(row.value) : 0;
}

export function refuseIfTooNew(version: number, path: string): void {
  if (version <= LATEST_SCHEMA_VERSION) return;
  throw new StorageError(
    "schema_too_new",
    `the journal at ${path} has schema version ${version}, newer than version ${LATEST_SCHEMA_VERSION} that this atomic knows`,
    { hint: "upgrade atomic, or point --home at another directory" },
  );
}

/** Applies pending migrations in one IMMEDIATE transaction (the dialect begins transactions that way). */
export async function migrate<DB>(db: Kysely<DB>, path: string): Promise<void> {
  await db.transaction().execute(async (trx) => {
    const version = await currentVersion(trx);
    refuseIfTooNew(version, path);
    const pending = MIGRATIONS.filter((m) => m.version > version);
    if (pending.length === 0) return;
    // Migrations are written against whatever tables existed at their version, not today's types.
    const untyped = trx as unknown as AnyDb;
    for (const m of pending) await m.up(untyped);
    await writeVersion(trx, LATEST_SCHEMA_VERSION);
  });
}

/** Anything `sql\`...\`.execute()` accepts: a Kysely instance or a transaction of any schema. */
type Executor = Parameters<ReturnType<typeof sql>["execute"]>[0];

async function currentVersion(db: Executor): Promise<number> {
  const meta = await sql<{ n: number }>`select count(*) as n from sqlite_master where type = 'table' and name = 'meta'`.execute(db);
  if (!meta.rows[0]?.n) return 0;
  const row = await sql<{ value: string }>`select value from meta where key = 'schema_version'`.execute(db);
  return row.rows[0] ? Number(row.rows[0].value) : 0;
}

async function writeVersion(db: Executor, version: number): Promise<void> {
  await sql`insert into meta (key, value) values ('schema_version', ${String(version)})
            on conflict (key) do update set value = excluded.value`.execute(db);
}
