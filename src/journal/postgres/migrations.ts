/**
 * Versioned schema of the Postgres journal, in the schema the URL names
 * (`?schema=`, default `atomic`).
 *
 * Version 1 is the whole of what the SQLite journal reached in its version 6
 * (../sqlite/migrations.ts), translated table by table and index by index:
 * runs, events, leases, the work queue, the stage index, messages,
 * deliveries, prompts; plus what only a concurrent backend needs: the
 * change clock (a one-row counter whose row lock orders change numbers by
 * commit, JournalViews in ../views.ts) and append batches (receipts of
 * append calls, so a call whose COMMIT's outcome is unknown can ask again).
 * Versions 3 (retention: tombstones of deleted runs) and 4 (schedules) follow
 * SQLite's versions 7 and 8. Version 6 (worker hosts, ../fleet.ts) and 7
 * (the artifact store, ./artifacts.ts) have no SQLite counterpart: the
 * embedded journal has no hosts, and its stages' files are the local ones.
 * Version 8 replaces the append functions (append-sql-v8.ts: fewer
 * statements per append, measured); version 9 replaces append_entries again
 * so that only a run's creation and patches take change numbers, not every
 * append, and drops the events' foreign key to runs. Version 10 replaces
 * upsert_stage (upsert-stage-v10.ts): a stage's row only moves forward.
 * Version 15 gives worker hosts' claim holds a kind (../fleet.ts); it has no
 * SQLite counterpart either. Version 16 stores each run's origin on its row
 * (../run-origin-sql.ts), as SQLite's version 15 does.
 * Host-wide admission slots are not here: they are per host by design
 * (../admission-slots.ts) and stay in a local file.
 * Column types: text for ids and JSON (the exact text JSON.stringify made,
 * as on SQLite, so the row mappers of ../sqlite/tables.ts serve both),
 * bigint for times (ms since the epoch) and counters, integer 0/1 flags.
 *
 * Migrating: `migrate` runs every pending version in one transaction that
 * first takes a transaction-scoped advisory lock for the schema, so two
 * processes migrating at once run one after the other (the second finds
 * nothing to do); a failed migration leaves nothing behind. A schema whose
 * version is newer than the newest here was written by a newer atomic: it is
 * refused (`schema_too_new`) before anything is written.
 *
 * Migrations are append-only: never edit a published one, add the next.
 */

import { StorageError, UsageError } from "../../shared/errors.ts";
import type { Client } from "./connection.ts";
import { sqlState } from "./connection.ts";
import { APPEND_FUNCTIONS } from "./append-sql.ts";
import { APPEND_FUNCTIONS_V8, APPEND_FUNCTIONS_V9 } from "./append-sql-v8.ts";
import { UPSERT_STAGE_V10 } from "./upsert-stage-v10.ts";
import { drivenByServiceSql, pgJson, recoveredSql, startOriginSql } from "../run-origin-sql.ts";

export interface PgMigration {
  version: number;
  name: string;
  statements: readonly string[];
}

export const MIGRATIONS: readonly PgMigration[] = [
  {
    version: 1,
    name: "runs, events, leases, work queue, stage index, messages, deliveries, prompts, change clock, append batches",
    statements: [
      `create table meta (key text primary key, value text not null)`,
      `create table runs (
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
        created_at bigint not null,
        updated_at bigint not null,
        ended_at bigint,
        last_seq bigint not null default 0,
        control text,
        control_rev bigint not null default 0,
        control_ack bigint not null default 0,
        change_seq bigint not null default 0
      )`,
      // `runs` lists root runs newest first, optionally by status; `show` lists a run's children; ids are found by prefix.
      `create index runs_roots_by_created on runs (created_at desc, id desc) where parent_id is null`,
      `create index runs_roots_by_status on runs (status, created_at desc, id desc) where parent_id is null`,
      `create index runs_by_parent on runs (parent_id, created_at desc, id desc) where parent_id is not null`,
      `create index runs_by_change on runs (change_seq)`,
      `create index runs_id_prefix on runs (id text_pattern_ops)`,
      // The events' foreign key to runs is dropped by version 9 (append-sql-v8.ts, APPEND_FUNCTIONS_V9).
      `create table events (
        run_id text not null references runs (id) on delete cascade,
        seq bigint not null,
        type text not null,
        key text,
        idempotency_key text,
        payload text,
        at bigint not null,
        primary key (run_id, seq)
      )`,
      `create unique index events_idempotency on events (run_id, idempotency_key) where idempotency_key is not null`,
      // No foreign key to runs: a lease is taken before the root run's first event creates it.
      `create table leases (
        run_id text primary key,
        holder_id text not null,
        host text not null,
        pid bigint not null,
        pid_start bigint not null,
        epoch bigint not null,
        renewed_at bigint not null,
        timeout_ms bigint not null,
        released integer not null default 0
      )`,
      `create table work_items (
        id text primary key,
        root_id text not null,
        run_id text not null,
        stage_key text not null,
        attempt integer not null,
        descriptor text not null,
        state text not null check (state in ('ready', 'leased', 'completed', 'failed', 'abandoned')),
        generation integer not null default 1,
        worker_id text,
        epoch bigint not null default 0,
        lease_expires_at bigint,
        ready_at bigint not null,
        created_at bigint not null,
        updated_at bigint not null,
        result text,
        error text,
        root_epoch bigint not null default 0
      )`,
      // FIFO claims scan only ready rows (a partial index: docs/design/platform.md measured claims 2x slower without).
      `create index work_ready on work_items (ready_at, id) where state = 'ready'`,
      `create index work_by_root on work_items (root_id)`,
      `create table work_ops (
        op_id text primary key,
        work_id text not null,
        digest text not null,
        receipt text not null,
        at bigint not null
      )`,
      `create table stage_index (
        root_id text not null,
        run_id text not null,
        stage_key text not null,
        path text not null,
        name text not null,
        kind text not null check (kind in ('stage', 'child')),
        state text not null check (state in ('running', 'failed', 'finished')),
        attempt integer not null default 0,
        child_run_id text,
        updated_at bigint not null,
        outcome text check (outcome in ('completed', 'failed')),
        input_tokens bigint not null default 0,
        output_tokens bigint not null default 0,
        cache_read_tokens bigint not null default 0,
        cache_write_tokens bigint not null default 0,
        cost_micro_usd bigint not null default 0,
        turns bigint not null default 0,
        has_usage integer not null default 0,
        primary key (run_id, stage_key)
      )`,
      `create index stage_index_by_path on stage_index (root_id, path)`,
      `create table messages (
        root_id text not null,
        id text not null,
        target text not null,
        text text not null,
        mode text not null check (mode in ('steer', 'followUp', 'interrupt')),
        sticky integer not null default 0,
        sender text not null,
        digest text not null,
        created_at bigint not null,
        primary key (root_id, id)
      )`,
      `create index messages_sticky on messages (root_id) where sticky = 1`,
      // seq orders a stage's messages (writers of one root serialise on its advisory lock); one delivery per message and stage.
      `create table deliveries (
        seq bigint generated always as identity primary key,
        root_id text not null,
        message_id text not null,
        stage_path text not null,
        run_id text,
        stage_key text,
        state text not null check (state in ('queued', 'delivered', 'undeliverable')),
        attempt integer,
        reason text,
        created_at bigint not null,
        settled_at bigint
      )`,
      `create unique index deliveries_once on deliveries (root_id, message_id, stage_path, coalesce(run_id, ''), coalesce(stage_key, ''))`,
      `create index deliveries_queued_by_path on deliveries (root_id, stage_path) where state = 'queued'`,
      `create index deliveries_queued_bound on deliveries (root_id, seq) where state = 'queued' and stage_key is not null`,
      `create index deliveries_by_stage on deliveries (run_id, stage_key, seq) where stage_key is not null`,
      `create index deliveries_by_root on deliveries (root_id, seq)`,
      `create table prompts (
        root_id text not null,
        id text not null,
        run_id text not null,
        stage_key text not null,
        question text not null,
        choices text,
        state text not null check (state in ('open', 'answered', 'timed_out')),
        answer text,
        answered_by text,
        deadline bigint,
        created_at bigint not null,
        answered_at bigint,
        primary key (root_id, id)
      )`,
      // One row; its lock, taken last in a writing transaction and held to its commit, orders change numbers by commit.
      `create table change_clock (id integer primary key check (id = 1), n bigint not null)`,
      `insert into change_clock (id, n) values (1, 0)`,
      // Receipts of append calls by their batch id (append.ts): pruned after a day.
      `create table append_batches (id text primary key, outcomes text not null, at bigint not null)`,
      `create index append_batches_by_age on append_batches (at)`,
      ...APPEND_FUNCTIONS,
    ],
  },
  {
    version: 2,
    name: "work queue: ready items indexed by root and drive",
    statements: [
      // A pool claims the oldest ready item of its own drive (root, root epoch): in FIFO order straight from this
      // index, however many ready items other runs have queued ahead of it (work_ready alone would be walked past
      // them on every claim: measured 0.14 against 0.09 ms with 1 in 100 ready items its own, and it grows).
      `create index work_ready_by_root on work_items (root_id, root_epoch, ready_at, id) where state = 'ready'`,
    ],
  },
  {
    version: 3,
    name: "retention: work operations indexed by work item; tombstones of deleted runs",
    statements: [
      // Retention (retention.ts) deletes a run's operations through its items.
      `create index work_ops_by_work on work_ops (work_id)`,
      // A deleted run's last state under a change number of its own from the change clock (reads.ts: status
      // readers learn of the deletion in change order). The clock is a counter, so numbers never go back anyway.
      `create table run_tombstones (
        change_seq bigint primary key,
        id text not null,
        root_id text not null,
        parent_id text,
        status text not null,
        last_seq bigint not null,
        deleted_at bigint not null
      )`,
      `create index run_tombstones_by_age on run_tombstones (deleted_at)`,
    ],
  },
  {
    version: 4,
    name: "schedules",
    statements: [
      // The contract: ../schedules.ts (the same columns as SQLite's migration 8). Inputs are JSON text; times ms.
      `create table schedules (
        name text primary key,
        cron text not null,
        timezone text,
        workflow text not null,
        inputs text not null,
        cwd text not null,
        overlap text not null check (overlap in ('skip', 'buffer-one', 'allow')),
        catch_up text not null check (catch_up in ('skip', 'run-once')),
        paused integer not null default 0,
        created_at bigint not null,
        updated_at bigint not null,
        last_tick_at bigint,
        last_run_id text,
        buffered_tick_at bigint
      )`,
    ],
  },
  {
    version: 5,
    name: "stage index: queued stages (waiting for a free worker) apart from running ones",
    statements: [
      // SQLite's migration 9 rebuilds its table for this; Postgres changes the CHECK in place.
      `alter table stage_index drop constraint stage_index_state_check`,
      `alter table stage_index add constraint stage_index_state_check check (state in ('queued', 'running', 'failed', 'finished'))`,
    ],
  },
  {
    version: 6,
    name: "worker hosts: queues, the host registry, messages between roots and hosts, paused roots",
    statements: [
      // A stage's queue and the pool protocol its root speaks, from its descriptor (the stage request): derived
      // by the database, so the append that enqueues the item needs no change. Descriptors without them are
      // the default queue and protocol 0 (enqueued before this migration: no host runs those).
      `alter table work_items add column queue text generated always as (coalesce((descriptor::jsonb)->>'queue', 'default')) stored`,
      `alter table work_items add column protocol integer generated always as (coalesce(((descriptor::jsonb)->>'protocol')::integer, 0)) stored`,
      // A host's claim: the oldest ready item of its queues, any root (../../fleet/host.ts).
      `create index work_ready_by_queue on work_items (queue, ready_at, id) where state = 'ready'`,
      // Leased items by expiry: the sweep that gives back the items of a host that stopped renewing.
      `create index work_leased_by_expiry on work_items (lease_expires_at) where state = 'leased'`,
      // One row per worker host (\`atomic worker\`), refreshed by its heartbeat; times by the database clock.
      `create table worker_hosts (
        host_id text primary key,
        version text not null,
        protocol integer not null,
        schema_version integer not null,
        queues text[] not null,
        slots integer not null,
        busy integer not null,
        state text not null check (state in ('running', 'draining', 'stopped')),
        workdir text not null,
        pid integer not null,
        refused text,
        started_at bigint not null,
        heartbeat_at bigint not null
      )`,
      // Host → root: live runner events and delivery answers of remote stages (the pool protocol's messages),
      // consumed (deleted) by the root that drives the run.
      `create table fleet_up (seq bigserial primary key, root_id text not null, body jsonb not null, at bigint not null)`,
      `create index fleet_up_by_root on fleet_up (root_id, seq)`,
      // Root → host: cancel, deliver and wrap-up for a remote stage, read by the host that runs the item.
      `create table fleet_down (seq bigserial primary key, root_id text not null, work_id text not null, body jsonb not null, at bigint not null)`,
      `create index fleet_down_by_work on fleet_down (work_id, seq)`,
      `create index fleet_down_by_age on fleet_down (at)`,
      // Paused roots: no host claims their items.
      `create table fleet_holds (root_id text primary key, at bigint not null)`,
    ],
  },
  {
    version: 7,
    name: "artifact store: stage files in chunks, readable from every host",
    statements: [
      // The contract and the append's locking: artifacts.ts. One row per file; a file's bytes in chunks of 256 KiB
      // at offsets that are multiples of it. No foreign key to runs: a host may ship a stage's first bytes before
      // the root's record of the stage commits; retention deletes by root id (retention.ts) in the tree's transaction.
      `create table artifact_files (
        id bigint generated always as identity primary key,
        root_id text not null,
        run_id text not null,
        stage text not null,
        name text not null,
        size bigint not null default 0,
        dropped bigint not null default 0,
        complete integer not null default 0,
        updated_at bigint not null
      )`,
      `create unique index artifact_files_by_key on artifact_files (run_id, stage, name)`,
      `create index artifact_files_by_root on artifact_files (root_id)`,
      `create table artifact_chunks (
        file_id bigint not null references artifact_files (id) on delete cascade,
        off bigint not null,
        data bytea not null,
        primary key (file_id, off)
      )`,
    ],
  },
  {
    // 6 and 7 are the worker hosts' (work queue, artifacts): this one depends on neither.
    version: 8,
    name: "append: one update of a run's row per batch, no receipt lookup on a first call",
    // Replaces functions only: no table changes, rows stay as they are (append-sql-v8.ts says what and why).
    statements: APPEND_FUNCTIONS_V8,
  },
  {
    version: 9,
    name: "append: change numbers only for runs created or patched, not for every append; events without a foreign key",
    // Replaces append_entries (append-sql-v8.ts, appendEntries; the change clock and runs_by_change stay) and drops
    // the events' foreign key to runs (APPEND_FUNCTIONS_V9 says why).
    statements: APPEND_FUNCTIONS_V9,
  },
  {
    version: 10,
    name: "stage index: a stage's row only moves forward (a late progress record no longer shows a finished stage running)",
    // Replaces upsert_stage only (upsert-stage-v10.ts says what and why).
    statements: [UPSERT_STAGE_V10],
  },
  {
    version: 11,
    name: "pinned code: each workflow file a run uses, stored once by its digest (../code.ts)",
    statements: [
      `create table code_files (
        digest text primary key,
        content bytea not null,
        stored_at bigint not null
      )`,
    ],
  },
  {
    version: 12,
    name: "skipped run status (ctx.exit)",
    statements: [
      `alter table runs drop constraint runs_status_check`,
      `alter table runs add constraint runs_status_check check (status in ('running', 'completed', 'failed', 'cancelled', 'blocked', 'interrupted', 'awaiting_input', 'skipped'))`,
    ],
  },
  {
    version: 13,
    name: "delivery states: received, receipt-unverified, session-replaced, stage-terminal (../delivery-states.ts)",
    statements: [
      `alter table deliveries drop constraint deliveries_state_check`,
      `alter table deliveries add constraint deliveries_state_check check (state in ('queued', 'delivered', 'received', 'receipt-unverified', 'session-replaced', 'stage-terminal', 'undeliverable'))`,
      `update deliveries set state = 'stage-terminal' where state = 'undeliverable' and reason like 'stage % finished before the message arrived'`,
    ],
  },
  {
    version: 14,
    name: "run tags (../tags.ts): key=value labels on root runs, found by key and value",
    statements: [
      `create table run_tags (
        run_id text not null,
        key text not null,
        value text not null,
        set_at bigint not null,
        primary key (run_id, key)
      )`,
      `create index run_tags_by_value on run_tags (key, value, run_id)`,
    ],
  },
  {
    version: 15,
    name: "claim holds by kind (../fleet.ts): a paused root, a budget used up, a budgeted result its root has not counted yet",
    statements: [
      // The rows so far are pauses; a root may now hold several kinds at once (paused, spent, result:<work id>).
      `alter table fleet_holds add column kind text not null default 'paused'`,
      `alter table fleet_holds drop constraint fleet_holds_pkey`,
      `alter table fleet_holds add primary key (root_id, kind)`,
    ],
  },
  {
    version: 16,
    name: "run origins stored on runs (../run-origin-sql.ts): how each run was started, whether the service recovered it",
    statements: [
      // Filled for the runs already recorded from their events, then kept by a trigger on events (the file says why).
      `alter table runs add column origin text, add column recovered integer not null default 0`,
      `update runs set origin = s.origin from (select e.run_id, ${startOriginSql("e.payload", "e.run_id", pgJson)} as origin
        from events e where e.seq = 1 and e.type = 'run_started') s where s.run_id = runs.id and s.origin is not null`,
      `update runs set recovered = 1 where exists (select 1 from events r where r.run_id = runs.id and r.type = 'run_resumed'
        and ${drivenByServiceSql("r.payload", pgJson)} and ${recoveredSql("r.run_id", "r.seq", pgJson)})`,
      `create index runs_roots_by_origin on runs (origin, created_at desc, id desc) where parent_id is null and origin is not null`,
      `create index runs_roots_recovered on runs (created_at desc, id desc) where parent_id is null and recovered = 1`,
      `create function runs_origin_from_event() returns trigger language plpgsql as $fn$
      begin
        if new.seq = 1 and new.type = 'run_started' then
          update runs set origin = ${startOriginSql("new.payload", "new.run_id", pgJson)} where id = new.run_id;
        elsif new.type = 'run_resumed' and ${drivenByServiceSql("new.payload", pgJson)} then
          update runs set recovered = 1 where id = new.run_id and recovered = 0 and ${recoveredSql("new.run_id", "new.seq", pgJson)};
        end if;
        return null;
      end $fn$`,
      `create trigger runs_origin_from_event after insert on events for each row
        when (new.seq = 1 or new.type = 'run_resumed') execute function runs_origin_from_event()`,
    ],
  },
];

export const LATEST_SCHEMA_VERSION = MIGRATIONS.at(-1)!.version;

function lockKey(schema: string): string {
  return `atomic migrate ${schema}`;
}

/**
 * The stored version of `schema` (0: no journal there yet), read without
 * writing anything. The catalogs are read with plain queries (a fresh
 * snapshot each), not to_regclass: its cache may not have seen a schema
 * another process created while this one waited for the migration lock.
 */
export async function readVersion(c: Client, schema: string): Promise<number> {
  const tables = (await c.query<{ tablename: string }>("select tablename from pg_tables where schemaname = $1", [schema])).rows;
  if (tables.length === 0) return 0;
  if (!tables.some((t) => t.tablename === "meta")) {
    throw new StorageError("storage_corrupt", `the schema ${schema} holds tables that are not an atomic journal`, {
      hint: "name another schema in the journal URL (?schema=NAME)",
    });
  }
  const row = (await c.query<{ value: string }>(`select value from "${schema}".meta where key = 'schema_version'`)).rows[0];
  return row ? Number(row.value) : 0;
}

export function refuseIfTooNew(version: number, location: string): void {
  if (version <= LATEST_SCHEMA_VERSION) return;
  throw new StorageError(
    "schema_too_new",
    `the journal at ${location} has schema version ${version}, newer than version ${LATEST_SCHEMA_VERSION} that this atomic knows`,
    { hint: "upgrade atomic, or name another schema in the journal URL (?schema=NAME)" },
  );
}

/** Applies the pending migrations of `schema` (creating it), under the schema's advisory lock. */
export async function migrate(c: Client, schema: string, location: string, user: string, database: string): Promise<void> {
  await c.query("begin");
  try {
    await c.query("select pg_advisory_xact_lock(hashtext($1))", [lockKey(schema)]);
    const version = await readVersion(c, schema);
    refuseIfTooNew(version, location);
    if (version === LATEST_SCHEMA_VERSION) {
      await c.query("commit");
      return;
    }
    const exists = (await c.query("select 1 from pg_namespace where nspname = $1", [schema])).rowCount;
    if (!exists) await c.query(`create schema "${schema}"`);
    await c.query(`set local search_path to "${schema}"`);
    for (const m of MIGRATIONS.filter((x) => x.version > version)) {
      for (const statement of m.statements) await c.query(statement);
    }
    await c.query(
      "insert into meta (key, value) values ('schema_version', $1) on conflict (key) do update set value = excluded.value",
      [String(LATEST_SCHEMA_VERSION)],
    );
    await c.query("commit");
  } catch (err) {
    await c.query("rollback").catch(() => {});
    if (sqlState(err) === "42501") {
      throw new UsageError("journal_permission", `user ${user} may not create the journal's schema ${schema} in database ${database} at ${location}`, {
        hint: `create it for that user (create schema ${schema} authorization ${user}), or grant it CREATE on the database`,
        cause: err,
      });
    }
    throw err;
  }
}
