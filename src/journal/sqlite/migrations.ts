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

import { sql, type Kysely } from "kysely";
import { StorageError } from "../../shared/errors.ts";
import { LATEST_SCHEMA_VERSION, refuseIfTooNew } from "./schema-version.ts";
import { drivenByServiceSql, recoveredSql, sqliteJson, startOriginSql } from "../run-origin-sql.ts";

/** Migrations see an untyped database: the table types describe the newest schema only. */
type AnyDb = Kysely<Record<string, never>>;

interface Migration {
  version: number;
  name: string;
  /**
   * Rebuilds a table other tables reference (SQLite cannot alter a CHECK).
   * Foreign keys are switched off around the migration transaction (a
   * DROP TABLE would otherwise cascade) and checked before it commits: the
   * procedure SQLite documents for "other kinds of table schema changes".
   */
  rebuildsTables?: boolean;
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
      // FIFO claims scan only ready rows (a partial index: docs/design/platform.md measured claims 2x slower without).
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
  {
    version: 3,
    name: "awaiting_input run status; stage index, messages, deliveries, prompts",
    rebuildsTables: true,
    async up(db) {
      // The runs table again, with "awaiting_input" in its status CHECK (columns of versions 1 and 2, in order).
      await sql`create table runs_v3 (
        id text primary key,
        root_id text not null,
        parent_id text references runs (id),
        parent_key text,
        depth integer not null default 0,
        workflow_name text not null,
        workflow_path text not null,
        workflow_digest text not null,
        inputs text,
        status text not null check (status in ('running', 'completed', 'failed', 'cancelled', 'blocked', 'interrupted', 'awaiting_input')),
        outputs text,
        error text,
        created_at integer not null,
        updated_at integer not null,
        ended_at integer,
        last_seq integer not null default 0,
        control text,
        control_rev integer not null default 0,
        control_ack integer not null default 0
      ) strict`.execute(db);
      const columns = sql.raw(
        "id, root_id, parent_id, parent_key, depth, workflow_name, workflow_path, workflow_digest, inputs, status, outputs, error, created_at, updated_at, ended_at, last_seq, control, control_rev, control_ack",
      );
      await sql`insert into runs_v3 (${columns}) select ${columns} from runs`.execute(db);
      await sql`drop table runs`.execute(db);
      await sql`alter table runs_v3 rename to runs`.execute(db);
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

      await sql`create table stage_index (
        root_id text not null,
        run_id text not null,
        stage_key text not null,
        path text not null,
        name text not null,
        kind text not null check (kind in ('stage', 'child')),
        state text not null check (state in ('running', 'failed', 'finished')),
        attempt integer not null default 0,
        child_run_id text,
        updated_at integer not null,
        primary key (run_id, stage_key)
      ) strict, without rowid`.execute(db);
      await sql`create index stage_index_by_path on stage_index (root_id, path)`.execute(db);

      await sql`create table messages (
        root_id text not null,
        id text not null,
        target text not null,
        text text not null,
        mode text not null check (mode in ('steer', 'followUp', 'interrupt')),
        sticky integer not null default 0,
        sender text not null,
        digest text not null,
        created_at integer not null,
        primary key (root_id, id)
      ) strict`.execute(db);
      await sql`create index messages_sticky on messages (root_id) where sticky = 1`.execute(db);

      // seq (the rowid) orders a stage's messages; one delivery per message and stage (unbound: per path).
      await sql`create table deliveries (
        seq integer primary key,
        root_id text not null,
        message_id text not null,
        stage_path text not null,
        run_id text,
        stage_key text,
        state text not null check (state in ('queued', 'delivered', 'undeliverable')),
        attempt integer,
        reason text,
        created_at integer not null,
        settled_at integer
      ) strict`.execute(db);
      await sql`create unique index deliveries_once on deliveries (root_id, message_id, stage_path, coalesce(run_id, ''), coalesce(stage_key, ''))`.execute(db);
      // Limits and claims by path look at queued rows only; the driver's poll at queued rows bound to a stage.
      await sql`create index deliveries_queued_by_path on deliveries (root_id, stage_path) where state = 'queued'`.execute(db);
      await sql`create index deliveries_queued_bound on deliveries (root_id, seq) where state = 'queued' and stage_key is not null`.execute(db);
      await sql`create index deliveries_by_stage on deliveries (run_id, stage_key, seq) where stage_key is not null`.execute(db);
      await sql`create index deliveries_by_root on deliveries (root_id, seq)`.execute(db);

      await sql`create table prompts (
        root_id text not null,
        id text not null,
        run_id text not null,
        stage_key text not null,
        question text not null,
        choices text,
        state text not null check (state in ('open', 'answered', 'timed_out')),
        answer text,
        answered_by text,
        deadline integer,
        created_at integer not null,
        answered_at integer,
        primary key (root_id, id)
      ) strict`.execute(db);
    },
  },
  {
    version: 4,
    name: "work queue: items indexed by root alone; operations clustered by id",
    async up(db) {
      // A state change (claimed, completed) no longer moves an entry of this index: one page less per transaction.
      await sql`drop index work_by_root`.execute(db);
      await sql`create index work_by_root on work_items (root_id)`.execute(db);
      // Without rowid: one b-tree per operation, not a table and its primary-key index.
      await sql`create table work_ops_v4 (
        op_id text primary key,
        work_id text not null,
        digest text not null,
        receipt text not null,
        at integer not null
      ) strict, without rowid`.execute(db);
      await sql`insert into work_ops_v4 (op_id, work_id, digest, receipt, at) select op_id, work_id, digest, receipt, at from work_ops`.execute(db);
      await sql`drop table work_ops`.execute(db);
      await sql`alter table work_ops_v4 rename to work_ops`.execute(db);
    },
  },
  {
    version: 5,
    name: "stage index: outcome and usage per stage; runs: change numbers (status views)",
    async up(db) {
      await sql`alter table stage_index add column outcome text check (outcome in ('completed', 'failed'))`.execute(db);
      for (const column of ["input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_micro_usd", "turns", "has_usage"]) {
        await sql`alter table stage_index add column ${sql.raw(column)} integer not null default 0`.execute(db);
      }
      // Stages recorded before: outcome and usage folded from their events once (one pass over the three event types).
      await sql`update stage_index set outcome = (
          select case json_extract(e.payload, '$.result.status') when 'completed' then 'completed' else 'failed' end
            from events e where e.run_id = stage_index.run_id and e.key = stage_index.stage_key and e.type = 'checkpoint'
            order by e.seq desc limit 1)
        where kind = 'stage' and state = 'finished'`.execute(db);
      await sql`create temp table stage_usage_v5 as
        select run_id, stage_key,
               sum(coalesce(json_extract(u, '$.inputTokens'), 0)) as i, sum(coalesce(json_extract(u, '$.outputTokens'), 0)) as o,
               sum(coalesce(json_extract(u, '$.cacheReadTokens'), 0)) as cr, sum(coalesce(json_extract(u, '$.cacheWriteTokens'), 0)) as cw,
               sum(coalesce(round(json_extract(u, '$.costMicroUsd')), 0)) as c, sum(coalesce(json_extract(u, '$.turns'), 0)) as t
          from (select run_id,
                       case type when 'usage_recorded' then json_extract(payload, '$.stageKey') else key end as stage_key,
                       case type when 'checkpoint' then json_extract(payload, '$.result.usage') else json_extract(payload, '$.usage') end as u
                  from events where type in ('checkpoint', 'step_failed', 'usage_recorded'))
         where u is not null and stage_key is not null
         group by run_id, stage_key`.execute(db);
      await sql`update stage_index set (input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_micro_usd, turns, has_usage) =
          (select i, o, cr, cw, c, t, 1 from stage_usage_v5 b where b.run_id = stage_index.run_id and b.stage_key = stage_index.stage_key)
        where kind = 'stage' and exists (select 1 from stage_usage_v5 b where b.run_id = stage_index.run_id and b.stage_key = stage_index.stage_key)`.execute(db);
      await sql`drop table stage_usage_v5`.execute(db);

      // Existing rows get distinct change numbers in creation order; new changes take max + 1 (statements.ts).
      await sql`alter table runs add column change_seq integer not null default 0`.execute(db);
      await sql`update runs set change_seq = rowid`.execute(db);
      await sql`create index runs_by_change on runs (change_seq)`.execute(db);
    },
  },
  {
    version: 6,
    name: "work items carry their root's lease epoch",
    async up(db) {
      // Items enqueued before this version belong to an earlier drive (epoch 0 is below every lease's): no claim takes them.
      await sql`alter table work_items add column root_epoch integer not null default 0`.execute(db);
    },
  },
  {
    version: 7,
    name: "retention: work operations indexed by work item; tombstones of deleted runs",
    async up(db) {
      // Retention deletes a run's operations through its items.
      await sql`create index work_ops_by_work on work_ops (work_id)`.execute(db);
      // A deleted run's last change number and a new one (views.ts: readers learn of the deletion in change
      // order, and change numbers never go back when the run holding the highest one is deleted).
      await sql`create table run_tombstones (
        change_seq integer primary key,
        id text not null,
        root_id text not null,
        parent_id text,
        status text not null,
        last_seq integer not null,
        deleted_at integer not null
      ) strict`.execute(db);
    },
  },
  {
    version: 8,
    name: "schedules",
    async up(db) {
      // The contract: ../schedules.ts. Inputs are JSON text; times ms since the epoch; paused 0 or 1.
      await sql`create table schedules (
        name text primary key,
        cron text not null,
        timezone text,
        workflow text not null,
        inputs text not null,
        cwd text not null,
        overlap text not null check (overlap in ('skip', 'buffer-one', 'allow')),
        catch_up text not null check (catch_up in ('skip', 'run-once')),
        paused integer not null default 0,
        created_at integer not null,
        updated_at integer not null,
        last_tick_at integer,
        last_run_id text,
        buffered_tick_at integer
      ) strict`.execute(db);
    },
  },
  {
    version: 9,
    name: "stage index: queued stages (waiting for a free worker) apart from running ones",
    async up(db) {
      // SQLite cannot alter a CHECK: the table again with "queued" in its state CHECK (columns of versions 3 and 5, in
      // order), its rows copied, its index made again. No table references stage_index, so foreign keys may stay on.
      await sql`create table stage_index_v9 (
        root_id text not null,
        run_id text not null,
        stage_key text not null,
        path text not null,
        name text not null,
        kind text not null check (kind in ('stage', 'child')),
        state text not null check (state in ('queued', 'running', 'failed', 'finished')),
        attempt integer not null default 0,
        child_run_id text,
        updated_at integer not null,
        outcome text check (outcome in ('completed', 'failed')),
        input_tokens integer not null default 0,
        output_tokens integer not null default 0,
        cache_read_tokens integer not null default 0,
        cache_write_tokens integer not null default 0,
        cost_micro_usd integer not null default 0,
        turns integer not null default 0,
        has_usage integer not null default 0,
        primary key (run_id, stage_key)
      ) strict, without rowid`.execute(db);
      const columns = sql.raw(
        "root_id, run_id, stage_key, path, name, kind, state, attempt, child_run_id, updated_at, outcome, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_micro_usd, turns, has_usage",
      );
      await sql`insert into stage_index_v9 (${columns}) select ${columns} from stage_index`.execute(db);
      await sql`drop table stage_index`.execute(db);
      await sql`alter table stage_index_v9 rename to stage_index`.execute(db);
      await sql`create index stage_index_by_path on stage_index (root_id, path)`.execute(db);
    },
  },
  {
    version: 10,
    name: "work queue: a commit's operation id and digest on its item, not in a table of their own",
    async up(db) {
      // Every commit wrote a row of work_ops and two index entries after looking the op id up; on the item itself
      // they are part of the outcome's update (work-queue.ts). The unique index keeps an op id to one item.
      await sql`alter table work_items add column op_id text`.execute(db);
      await sql`alter table work_items add column op_digest text`.execute(db);
      // At most one operation committed an item (its outcome is final); the newest if an old file holds more.
      await sql`update work_items
                   set op_id = (select o.op_id from work_ops o where o.work_id = work_items.id order by o.at desc limit 1),
                       op_digest = (select o.digest from work_ops o where o.work_id = work_items.id order by o.at desc limit 1)
                 where id in (select work_id from work_ops)`.execute(db);
      await sql`create unique index work_by_op on work_items (op_id) where op_id is not null`.execute(db);
      await sql`drop table work_ops`.execute(db);
    },
  },
  {
    version: 11,
    name: "pinned code: each workflow file a run uses, stored once by its digest (../code.ts)",
    async up(db) {
      await sql`create table code_files (
        digest text primary key,
        content blob not null,
        stored_at integer not null
      ) strict, without rowid`.execute(db);
    },
  },
  {
    version: 12,
    name: "skipped run status (ctx.exit)",
    rebuildsTables: true,
    async up(db) {
      // The runs table again, with "skipped" in its status CHECK (columns of versions 3 and 5, in order), its rows
      // copied and its indexes made again.
      await sql`create table runs_v12 (
        id text primary key,
        root_id text not null,
        parent_id text references runs (id),
        parent_key text,
        depth integer not null default 0,
        workflow_name text not null,
        workflow_path text not null,
        workflow_digest text not null,
        inputs text,
        status text not null check (status in ('running', 'completed', 'failed', 'cancelled', 'blocked', 'interrupted', 'awaiting_input', 'skipped')),
        outputs text,
        error text,
        created_at integer not null,
        updated_at integer not null,
        ended_at integer,
        last_seq integer not null default 0,
        control text,
        control_rev integer not null default 0,
        control_ack integer not null default 0,
        change_seq integer not null default 0
      ) strict`.execute(db);
      const columns = sql.raw(
        "id, root_id, parent_id, parent_key, depth, workflow_name, workflow_path, workflow_digest, inputs, status, outputs, error, created_at, updated_at, ended_at, last_seq, control, control_rev, control_ack, change_seq",
      );
      await sql`insert into runs_v12 (${columns}) select ${columns} from runs`.execute(db);
      await sql`drop table runs`.execute(db);
      await sql`alter table runs_v12 rename to runs`.execute(db);
      await sql`create index runs_roots_by_created on runs (created_at desc, id desc) where parent_id is null`.execute(db);
      await sql`create index runs_roots_by_status on runs (status, created_at desc, id desc) where parent_id is null`.execute(db);
      await sql`create index runs_by_parent on runs (parent_id, created_at desc, id desc) where parent_id is not null`.execute(db);
      await sql`create index runs_by_change on runs (change_seq)`.execute(db);
    },
  },
  {
    version: 13,
    name: "delivery states: received, receipt-unverified, session-replaced, stage-terminal (../delivery-states.ts)",
    async up(db) {
      // SQLite cannot alter a CHECK: the table again with the new states (columns of version 3, in order), its rows
      // copied ("finished before the message arrived" was stage-terminal), its indexes made again. No table refers to it.
      await sql`create table deliveries_v13 (
        seq integer primary key,
        root_id text not null,
        message_id text not null,
        stage_path text not null,
        run_id text,
        stage_key text,
        state text not null check (state in ('queued', 'delivered', 'received', 'receipt-unverified', 'session-replaced', 'stage-terminal', 'undeliverable')),
        attempt integer,
        reason text,
        created_at integer not null,
        settled_at integer
      ) strict`.execute(db);
      const columns = sql.raw("seq, root_id, message_id, stage_path, run_id, stage_key, state, attempt, reason, created_at, settled_at");
      await sql`insert into deliveries_v13 (${columns}) select ${columns} from deliveries`.execute(db);
      await sql`update deliveries_v13 set state = 'stage-terminal' where state = 'undeliverable' and reason like 'stage % finished before the message arrived'`.execute(db);
      await sql`drop table deliveries`.execute(db);
      await sql`alter table deliveries_v13 rename to deliveries`.execute(db);
      await sql`create unique index deliveries_once on deliveries (root_id, message_id, stage_path, coalesce(run_id, ''), coalesce(stage_key, ''))`.execute(db);
      await sql`create index deliveries_queued_by_path on deliveries (root_id, stage_path) where state = 'queued'`.execute(db);
      await sql`create index deliveries_queued_bound on deliveries (root_id, seq) where state = 'queued' and stage_key is not null`.execute(db);
      await sql`create index deliveries_by_stage on deliveries (run_id, stage_key, seq) where stage_key is not null`.execute(db);
      await sql`create index deliveries_by_root on deliveries (root_id, seq)`.execute(db);
    },
  },
  {
    version: 14,
    name: "run tags (../tags.ts): key=value labels on root runs, found by key and value",
    async up(db) {
      await sql`create table run_tags (
        run_id text not null,
        key text not null,
        value text not null,
        set_at integer not null,
        primary key (run_id, key)
      ) strict, without rowid`.execute(db);
      await sql`create index run_tags_by_value on run_tags (key, value, run_id)`.execute(db);
    },
  },
  {
    version: 15,
    name: "run origins stored on runs (../run-origin-sql.ts): how each run was started, whether the service recovered it",
    async up(db) {
      // Filled for the runs already recorded from their events, then kept by triggers on events (the file says why).
      await sql`alter table runs add column origin text`.execute(db);
      await sql`alter table runs add column recovered integer not null default 0`.execute(db);
      await sql.raw(`update runs set origin = (select ${startOriginSql("s.payload", "runs.id", sqliteJson)}
        from events s where s.run_id = runs.id and s.seq = 1 and s.type = 'run_started')`).execute(db);
      await sql.raw(`update runs set recovered = 1 where exists (select 1 from events r where r.run_id = runs.id and r.type = 'run_resumed'
        and ${drivenByServiceSql("r.payload", sqliteJson)} and ${recoveredSql("r.run_id", "r.seq", sqliteJson)})`).execute(db);
      await sql`create index runs_roots_by_origin on runs (origin, created_at desc, id desc) where parent_id is null and origin is not null`.execute(db);
      await sql`create index runs_roots_recovered on runs (created_at desc, id desc) where parent_id is null and recovered = 1`.execute(db);
      await sql.raw(`create trigger runs_origin_on_start after insert on events when new.seq = 1 and new.type = 'run_started'
        begin update runs set origin = ${startOriginSql("new.payload", "new.run_id", sqliteJson)} where id = new.run_id; end`).execute(db);
      await sql.raw(`create trigger runs_recovered_on_resume after insert on events
        when new.type = 'run_resumed' and ${drivenByServiceSql("new.payload", sqliteJson)}
        begin update runs set recovered = 1 where id = new.run_id and recovered = 0 and ${recoveredSql("new.run_id", "new.seq", sqliteJson)}; end`).execute(db);
    },
  },
];

/** Applies pending migrations in one IMMEDIATE transaction (the dialect begins transactions that way). */
export async function migrate<DB>(db: Kysely<DB>, path: string): Promise<void> {
  // Read outside the transaction only to decide about foreign keys (a no-op inside one); decided again inside.
  const before = await currentVersion(db);
  const rebuilds = MIGRATIONS.some((m) => m.version > before && m.rebuildsTables);
  if (rebuilds) await sql`pragma foreign_keys = off`.execute(db);
  try {
    await db.transaction().execute(async (trx) => {
      const version = await currentVersion(trx);
      refuseIfTooNew(version, path);
      const pending = MIGRATIONS.filter((m) => m.version > version);
      if (pending.length === 0) return;
      // Migrations are written against whatever tables existed at their version, not today's types.
      const untyped = trx as unknown as AnyDb;
      for (const m of pending) await m.up(untyped);
      if (rebuilds) {
        const broken = await sql<{ table: string }>`pragma foreign_key_check`.execute(trx);
        if (broken.rows.length > 0) {
          throw new StorageError("storage_corrupt", `the journal at ${path} has rows whose references broke while migrating`, {
            hint: "restore a backup of the file, or point --home at another directory",
          });
        }
      }
      await writeVersion(trx, LATEST_SCHEMA_VERSION);
    });
  } finally {
    if (rebuilds) await sql`pragma foreign_keys = on`.execute(db);
  }
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
