/**
 * Prepared statements for the journal's write paths: append, leases,
 * control requests.
 *
 * These bypass Kysely on purpose. Every durable workflow step costs one
 * append and every live run renews its lease; docs/design/platform.md measured Kysely
 * point queries 3.6-7.7x slower than raw prepared statements (compiling
 * the query tree on every call), which on an append with four statements
 * would add more than the commit itself costs with synchronous=NORMAL.
 * Each statement is prepared once per open journal and reused.
 *
 * Every write goes through `writeTransaction` (BEGIN IMMEDIATE ... COMMIT)
 * and runs synchronously from BEGIN to COMMIT, so nothing else in this
 * process can interleave with it; Kysely is used only for migrations (which
 * finish before the journal is handed out) and for single read statements.
 *
 * Lease statements are owner-fenced: each says whose lease it changes
 * (`where run_id = ? and holder_id = ? and epoch = ?`).
 */

import type { Database, SQLQueryBindings, Statement } from "bun:sqlite";
import type { EventsTable, LeasesTable, RunsTable } from "./tables.ts";
import { stageRecordMovesRow } from "../stage-index.ts";

type Bind = SQLQueryBindings;

/**
 * A runs row's next change number (../views.ts, JournalViews): one more than
 * the highest, of runs and of deleted runs' tombstones (retention.ts), two
 * index seeks (runs_by_change, the tombstones' primary key). Unique and increasing in
 * commit order because writes are serialized (BEGIN IMMEDIATE). Cost:
 * about 1 us per runs update (measured 1.1 → 2.1 us per UPDATE of a
 * 10,000-row table in memory), next to 35-200 us per append commit.
 */
export const NEXT_CHANGE =
  "(select max(coalesce((select max(change_seq) from runs), 0), coalesce((select max(change_seq) from run_tombstones), 0)) + 1)";

/** A row of `selectEvents`: seq, type, key, idempotency_key, payload, at. */
export type EventValues = [seq: number, type: string, key: string | null, idempotencyKey: string | null, payload: string | null, at: number];

export interface RunForAppend {
  root_id: string;
  last_seq: number;
  /** Seq of the event with the entry's idempotency key, if any. */
  idem_seq: number | null;
}

export class Statements {
  readonly begin: Statement<unknown, []>;
  readonly commit: Statement<unknown, []>;
  readonly rollback: Statement<unknown, []>;
  readonly savepoint: Statement<unknown, []>;
  readonly releaseSavepoint: Statement<unknown, []>;
  readonly rollbackToSavepoint: Statement<unknown, []>;

  /** A run's row (SqliteJournal.getRun: the driver's control poll and the engine's run lookups; Kysely compiled it on every call). */
  readonly selectRun: Statement<RunsTable, [runId: string]>;
  /** The run an entry targets, and in the same lookup the seq its idempotency key already has. */
  readonly selectRunForAppend: Statement<RunForAppend, [runId: string, idempotencyKey: string | null]>;
  readonly selectEvent: Statement<EventsTable, [runId: string, seq: number]>;
  /** A run's events after a seq, in order, at most `limit` (-1: all), as value arrays (see reads.ts readEvents). */
  readonly selectEvents: Statement<EventValues, [runId: string, afterSeq: number, limit: number]>;
  readonly insertRun: Statement<unknown, Bind[]>;
  readonly insertEvent: Statement<unknown, Bind[]>;
  readonly advanceRun: Statement<unknown, [lastSeq: number, updatedAt: number, runId: string]>;
  readonly advanceRunWithPatch: Statement<unknown, Bind[]>;
  readonly requestControl: Statement<{ control_rev: number }, [action: string, runId: string]>;
  readonly insertWork: Statement<unknown, Bind[]>;
  readonly abandonWork: Statement<unknown, [now: number, id: string, rootId: string]>;
  readonly upsertStage: Statement<unknown, Bind[]>;
  readonly insertPrompt: Statement<unknown, Bind[]>;

  readonly selectLease: Statement<LeasesTable, [rootId: string]>;
  readonly selectHeldLease: Statement<{ epoch: number }, [rootId: string, holderId: string, epoch: number]>;
  readonly insertLease: Statement<unknown, Bind[]>;
  readonly takeOverLease: Statement<unknown, Bind[]>;
  readonly renewLease: Statement<unknown, [renewedAt: number, timeoutMs: number, rootId: string, holderId: string, epoch: number]>;
  readonly releaseLease: Statement<unknown, [rootId: string, holderId: string, epoch: number]>;

  /** Whether the journal was opened with durability "full"; `syncFull` is the connection's current setting. */
  private readonly durable: boolean;
  private syncFull: boolean;

  /**
   * Commits of entries that only record progress (a stage attempt started)
   * need no fsync: losing them on power loss only re-runs a step that was
   * not checkpointed. So the connection switches to synchronous=NORMAL for
   * batches without a durable entry, and back to FULL for those with one.
   */
  setSyncFor(durableBatch: boolean): void {
    const full = durableBatch && this.durable;
    if (full === this.syncFull) return;
    this.db.run(`pragma synchronous = ${full ? "full" : "normal"}`);
    this.syncFull = full;
  }

  constructor(
    readonly db: Database,
    durability: "full" | "normal" = "full",
    /** How long a journal call waits for another process's write lock (ms, busy.ts); the connection itself must not wait (busy_timeout 0). */
    readonly busyTimeoutMs = 10_000,
  ) {
    this.durable = durability === "full";
    this.syncFull = this.durable;
    this.begin = db.prepare("begin immediate");
    this.commit = db.prepare("commit");
    this.rollback = db.prepare("rollback");
    this.savepoint = db.prepare("savepoint entry");
    this.releaseSavepoint = db.prepare("release entry");
    this.rollbackToSavepoint = db.prepare("rollback to entry");

    this.selectRun = db.prepare("select * from runs where id = ?");
    this.selectRunForAppend = db.prepare(
      `select root_id, last_seq,
              (select seq from events where run_id = ?1 and idempotency_key = ?2) as idem_seq
         from runs where id = ?1`,
    );
    this.selectEvent = db.prepare("select * from events where run_id = ? and seq = ?");
    this.selectEvents = db.prepare(
      "select seq, type, key, idempotency_key, payload, at from events where run_id = ? and seq > ? order by seq limit ?",
    );
    this.insertRun = db.prepare(
      `insert into runs (id, root_id, parent_id, parent_key, depth, workflow_name, workflow_path,
                         workflow_digest, inputs, status, created_at, updated_at, last_seq, change_seq)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, 0, ${NEXT_CHANGE})`,
    );
    this.insertEvent = db.prepare(
      `insert into events (run_id, seq, type, key, idempotency_key, payload, at)
       values (?, ?, ?, ?, ?, ?, ?)`,
    );
    // A plain append moves last_seq only, not the change number (JournalViews.changesSince): runs_by_change is not
    // rewritten on every step (bench/pool.ts).
    this.advanceRun = db.prepare(`update runs set last_seq = ?, updated_at = ? where id = ?`);
    // One statement for every patch shape: a flag per nullable field says whether to set it.
    this.advanceRunWithPatch = db.prepare(
      `update runs set
         last_seq = ?1, updated_at = ?2, change_seq = ${NEXT_CHANGE},
         status = coalesce(?3, status),
         outputs = case when ?4 then ?5 else outputs end,
         error = case when ?6 then ?7 else error end,
         ended_at = case when ?8 then ?9 else ended_at end,
         control = case when ?10 then null else control end,
         workflow_digest = coalesce(?11, workflow_digest),
         control_ack = max(control_ack, coalesce(?13, 0))
       where id = ?12`,
    );
    this.requestControl = db.prepare(
      "update runs set control = ?, control_rev = control_rev + 1 where id = ? returning control_rev",
    );
    this.abandonWork = db.prepare(
      "update work_items set state = 'abandoned', updated_at = ? where id = ? and root_id = ? and state in ('ready', 'leased')",
    );
    this.insertWork = db.prepare(
      `insert into work_items (id, root_id, run_id, root_epoch, stage_key, attempt, descriptor, state, generation,
                               epoch, ready_at, created_at, updated_at)
       values (?, ?, ?, ?, ?, ?, ?, 'ready', 1, 0, ?, ?, ?)`,
    );
    // A stage's row only moves forward (../stage-index.ts): never back to an older attempt or an earlier state.
    const moves = stageRecordMovesRow("stage_index", "excluded");
    this.upsertStage = db.prepare(
      `insert into stage_index (root_id, run_id, stage_key, path, name, kind, state, attempt, child_run_id, updated_at,
                                outcome, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_micro_usd, turns, has_usage)
       values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
       on conflict (run_id, stage_key) do update set
         path = excluded.path, name = excluded.name, kind = excluded.kind,
         state = case when ${moves} then excluded.state else state end,
         attempt = max(attempt, excluded.attempt), child_run_id = coalesce(excluded.child_run_id, child_run_id),
         updated_at = case when ${moves} then excluded.updated_at else updated_at end,
         outcome = case when ${moves} then excluded.outcome else outcome end,
         input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
         cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens, cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
         cost_micro_usd = cost_micro_usd + excluded.cost_micro_usd, turns = turns + excluded.turns,
         has_usage = max(has_usage, excluded.has_usage)`,
    );
    this.insertPrompt = db.prepare(
      `insert into prompts (root_id, id, run_id, stage_key, question, choices, state, deadline, created_at)
       values (?, ?, ?, ?, ?, ?, 'open', ?, ?)`,
    );

    this.selectLease = db.prepare("select * from leases where run_id = ?");
    this.selectHeldLease = db.prepare(
      "select epoch from leases where run_id = ? and holder_id = ? and epoch = ? and released = 0",
    );
    this.insertLease = db.prepare(
      `insert into leases (run_id, holder_id, host, pid, pid_start, epoch, renewed_at, timeout_ms, released)
       values (?, ?, ?, ?, ?, 1, ?, ?, 0)`,
    );
    // Fenced on the epoch the taker saw: the new holder replaces exactly that lease.
    this.takeOverLease = db.prepare(
      `update leases set holder_id = ?, host = ?, pid = ?, pid_start = ?, epoch = epoch + 1,
                         renewed_at = ?, timeout_ms = ?, released = 0
        where run_id = ? and epoch = ?`,
    );
    this.renewLease = db.prepare(
      `update leases set renewed_at = ?, timeout_ms = ?
        where run_id = ? and holder_id = ? and epoch = ? and released = 0`,
    );
    this.releaseLease = db.prepare(
      "update leases set released = 1 where run_id = ? and holder_id = ? and epoch = ? and released = 0",
    );
  }

  /**
   * BEGIN IMMEDIATE. Throws SQLITE_BUSY at once when another process holds
   * the write lock: the journal call that runs this transaction waits and
   * runs it again whole (busy.ts), without blocking this process.
   */
  beginImmediate(): void {
    this.begin.run();
  }

  finalize(): void {
    for (const value of Object.values(this)) {
      if (value && typeof value === "object" && "finalize" in value && value !== this.db) {
        (value as Statement).finalize();
      }
    }
  }
}

/**
 * Runs `fn` inside BEGIN IMMEDIATE ... COMMIT, rolling back if it throws.
 * `fn` must be synchronous: that is what keeps other code of this process
 * out of the transaction.
 */
export function writeTransaction<T>(s: Statements, fn: () => T): T {
  s.beginImmediate();
  try {
    const result = fn();
    s.commit.run();
    return result;
  } catch (err) {
    if (s.db.inTransaction) s.rollback.run();
    throw err;
  }
}
