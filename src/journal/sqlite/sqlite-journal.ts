/**
 * The embedded SQLite journal: one file (`$ATOMIC_HOME/atomic.db`) in WAL
 * mode, shared by every atomic process of the machine.
 *
 * Design notes:
 * - Writes (append, leases, control requests) run raw prepared statements
 *   (statements.ts) inside BEGIN IMMEDIATE transactions, synchronously from
 *   BEGIN to COMMIT. The append hot path bypasses the query builder because
 *   docs/design/platform.md measured Kysely point queries 3.6-7.7x slower than prepared
 *   statements. Measured (2 cores, Bun 1.4.4): a single-entry append costs
 *   1.0-1.35x (typically 1.1x) a raw single-row INSERT commit with
 *   synchronous=FULL (one fsync, nothing more). With NORMAL it is about
 *   2.3x (~40 us vs ~17 us): there the fsync is gone and the cost is the
 *   three B-tree pages an append dirties (event, idempotency index, runs
 *   row) against one, not the statements (about 10 us together).
 * - Migrations and the read/list queries go through Kysely, over our own
 *   bun:sqlite dialect (dialect.ts explains why not kysely-bun-sqlite).
 *   That side is a bundle of its own (kysely-layer.ts), loaded on first
 *   use: a run, its pool and an up-to-date open never load Kysely.
 * - Opening refuses, without altering it, a file that is not SQLite
 *   (storage_corrupt) or that a newer atomic wrote (schema_too_new); an
 *   unwritable location is storage_readonly, unless the file is there to be
 *   read: then it opens read-only (read-only.ts). Every SQLite failure surfaces
 *   as a StorageError with a hint, never a raw stack trace.
 * - `synchronous=FULL` by default: a recorded step survives power loss.
 *   `normal` durability keeps WAL's crash safety but may lose the last
 *   commits on power loss.
 */

import { Database } from "bun:sqlite";
import type { Kysely } from "kysely";
import { AtomicError, StorageError, UsageError } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import type { AppendEntry, AppendOutcome } from "../append.ts";
import type { AcquireOptions, Durability, Journal, ListRunsFilter } from "../journal.ts";
import type { MessageStore } from "../messages.ts";
import type { RunRetention } from "../retention.ts";
import type { HolderInfo, JournalEvent, Lease, RunRecord } from "../runs.ts";
import type { JournalViews } from "../views.ts";
import type { WorkQueue } from "../work-queue.ts";
import { SqliteMessageStore } from "./messages.ts";
import { SqliteViews } from "./views.ts";
import { SqliteRetention } from "./retention.ts";
import { SqliteScheduleStore } from "./schedules.ts";
import type { ScheduleStore } from "../schedules.ts";
import { SqliteCodeStore } from "./code.ts";
import { SqliteTagStore } from "./tags.ts";
import type { RunTagStore } from "../tags.ts";
import { SqliteCounters } from "./counters.ts";
import type { JournalCounters } from "../counters.ts";
import type { CodeStore } from "../code.ts";
import { SqliteWorkQueue } from "./work-queue.ts";
import { SqliteCommitWatch } from "./commit-watch.ts";
import type { CommitWatch } from "../commit-watch.ts";
import { appendEntries } from "./append.ts";
import { importEntry } from "../../shared/entry-points.ts";
import { readEvents } from "./event-reads.ts";
import * as leases from "./leases.ts";
import { LATEST_SCHEMA_VERSION, readSchemaVersion, refuseIfTooNew } from "./schema-version.ts";
import { isBusy, retryBusy } from "./busy.ts";
import { Statements, writeTransaction } from "./statements.ts";
import { toStorageError } from "./storage-errors.ts";
import { journalWritable, openReadOnlyDatabase, readOnlyRefusal } from "./read-only.ts";
import { fileChanged, fileIdentity, type FileIdentity } from "./file-identity.ts";
import { runFromRow, type JournalTables } from "./tables.ts";

/** The path that opens a journal in this process's memory (../memory.ts). */
export const MEMORY = ":memory:";

/** How often at most an append takes the journal file's size (ms). */
const SIZE_TAKEN_MS = 50;

export interface SqliteJournalOptions {
  durability?: Durability;
  /** How long a writer waits for another process's transaction (ms). */
  busyTimeoutMs?: number;
}

const DEFAULT_BUSY_TIMEOUT_MS = 10_000;

/** The Kysely layer (a bundle of its own, kysely-layer.ts) and a Kysely instance over one connection. */
interface KyselyQuery {
  layer: typeof import("./kysely-layer.ts");
  db: Kysely<JournalTables>;
}

async function openQuery(db: Database): Promise<KyselyQuery> {
  const layer = (await importEntry("journal/sqlite/kysely-layer.ts")) as unknown as KyselyQuery["layer"];
  return { layer, db: layer.openKysely(db) };
}

export class SqliteJournal implements Journal {
  #closed = false;
  /** When append last took the file's size (performance.now()). */
  #sizeTakenAt = -Infinity;
  /** Settles when the call now waiting for another process's lock is done (#run). */
  #waiting: Promise<void> | undefined;
  readonly work: WorkQueue;

  /** Kysely over this connection, made on first use (migrations, run listings). */
  #kysely: Promise<KyselyQuery> | undefined;

  private constructor(
    readonly location: string,
    private readonly db: Database,
    private readonly statements: Statements,
    query: KyselyQuery | undefined,
    /** The file behind `location` when it was opened (file-identity.ts). */
    private readonly opened: FileIdentity | undefined,
  ) {
    if (query) this.#kysely = Promise.resolve(query);
    this.workQueue = new SqliteWorkQueue(db, statements, (fn) => this.#run(fn));
    this.work = this.workQueue;
    this.messageStore = new SqliteMessageStore(db, statements, (fn) => this.#run(fn));
    this.messages = this.messageStore;
    this.sqliteViews = new SqliteViews(db, (fn) => this.#run(fn));
    this.views = this.sqliteViews;
    this.sqliteRetention = new SqliteRetention(db, statements, location, (fn) => this.#run(fn));
    this.retention = this.sqliteRetention;
    this.schedules = new SqliteScheduleStore(db, (fn) => this.#run(fn));
    this.code = new SqliteCodeStore(db, (fn) => this.#run(fn));
    this.tags = new SqliteTagStore(db, (fn) => this.#run(fn));
    this.counters = new SqliteCounters(db, (fn) => this.#run(fn));
    if (location !== MEMORY) this.commits = new SqliteCommitWatch(db, location);
  }

  readonly commits?: CommitWatch;

  readonly retention: RunRetention;
  private readonly sqliteRetention: SqliteRetention;
  readonly schedules: ScheduleStore;
  readonly code: CodeStore;
  readonly tags: RunTagStore;
  readonly counters: JournalCounters;

  readonly views: JournalViews;
  private readonly sqliteViews: SqliteViews;

  private readonly workQueue: SqliteWorkQueue;
  readonly messages: MessageStore;
  private readonly messageStore: SqliteMessageStore;

  /** Opens (creating and migrating if needed) the journal file at `path`. */
  static async open(path: string, opts: SqliteJournalOptions = {}): Promise<SqliteJournal> {
    let db: Database | undefined;
    let query: KyselyQuery | undefined;
    try {
      db = new Database(path, { create: true, readwrite: true });
      const opened = path === MEMORY ? undefined : fileIdentity(path);
      const busyTimeoutMs = Math.trunc(opts.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS);
      db.run(`pragma busy_timeout = ${busyTimeoutMs}`);
      // Before any pragma that writes: a foreign or newer database must stay untouched.
      const version = readSchemaVersion(db, path);
      refuseIfTooNew(version, path);
      // A new file frees the pages of deleted runs in steps (retention.ts); SQLite takes this only before the first table.
      if (version === 0) db.run("pragma auto_vacuum = incremental");
      await configure(db, path, opts.durability ?? "full", busyTimeoutMs);
      // Up to date (the usual case): no migration transaction, no Kysely (versions only go up, so none can become due).
      if (version < LATEST_SCHEMA_VERSION) {
        query = await openQuery(db);
        await query.layer.migrate(query.db, path);
      }
      // From here on a statement that finds another process's lock is retried here, in short sleeps
      // (Statements.beginImmediate explains why), rather than by SQLite's busy handler.
      db.run("pragma busy_timeout = 0");
      return new SqliteJournal(path, db, new Statements(db, opts.durability ?? "full", busyTimeoutMs), query, opened);
    } catch (err) {
      await query?.db.destroy();
      db?.close();
      const mapped = toStorageError(err, path);
      // A home this process cannot write: reading commands still work (read-only.ts).
      if (mapped instanceof StorageError && mapped.code === "storage_readonly") return SqliteJournal.openReadOnly(path, opts, mapped);
      throw mapped;
    }
  }

  private static openReadOnly(path: string, opts: SqliteJournalOptions, refused: StorageError): SqliteJournal {
    const db = openReadOnlyDatabase(path);
    if (!db) throw refused;
    try {
      const version = readSchemaVersion(db, path);
      refuseIfTooNew(version, path);
      if (version < LATEST_SCHEMA_VERSION) throw refused; // an upgrade would be a write
      const journal = new SqliteJournal(path, db, new Statements(db, opts.durability ?? "full", 0), undefined, fileIdentity(path));
      journal.readOnly = true;
      return journal;
    } catch (err) {
      db.close();
      throw toStorageError(err, path);
    }
  }

  /** Opened read-only (a home this process cannot write): every write is refused with readOnlyRefusal. */
  readOnly = false;

  assertWritable(): void {
    if (this.readOnly || !journalWritable(this.location)) throw readOnlyRefusal(this.location, undefined);
  }

  async acquireLease(rootId: RunId, holder: HolderInfo, opts: AcquireOptions): Promise<Lease> {
    return this.#run(() => leases.acquireLease(this.statements, rootId, holder, opts));
  }

  async renewLease(lease: Lease): Promise<Lease> {
    return this.#run(() => leases.renewLease(this.statements, lease));
  }

  async releaseLease(lease: Lease): Promise<void> {
    await this.#run(() => leases.releaseLease(this.statements, lease));
  }

  async getLease(rootId: RunId): Promise<Lease | undefined> {
    return this.#run(() => leases.getLease(this.statements, rootId));
  }

  async append(lease: Lease, entries: AppendEntry[]): Promise<AppendOutcome[]> {
    const outcomes = await this.#run(() => appendEntries(this.statements, lease, entries));
    // The file's size as of a recent commit is what a truncation is measured against (file-identity.ts). One
    // stat per SIZE_TAKEN_MS, not per commit: that was 3 % of a 500-stage fan-out's CPU (bench/pool.ts).
    const now = performance.now();
    if (now - this.#sizeTakenAt >= SIZE_TAKEN_MS) {
      this.#sizeTakenAt = now;
      this.storageFault();
    }
    return outcomes;
  }

  async getRun(id: RunId): Promise<RunRecord | undefined> {
    return this.#run(() => {
      const row = this.statements.selectRun.get(id);
      return row ? runFromRow(row) : undefined;
    });
  }

  async findRuns(prefix: string, limit: number): Promise<RunRecord[]> {
    return this.#kyselyRead((q) => q.layer.findRuns(q.db, prefix, limit));
  }

  async listRuns(filter?: ListRunsFilter): Promise<RunRecord[]> {
    return this.#kyselyRead((q) => q.layer.listRuns(q.db, filter));
  }

  async countRuns(filter?: ListRunsFilter): Promise<number> {
    return this.#kyselyRead((q) => q.layer.countRuns(q.db, filter));
  }

  async readEvents(runId: RunId, afterSeq?: number, limit?: number): Promise<JournalEvent[]> {
    return this.#run(() => readEvents(this.statements, runId, afterSeq, limit));
  }

  async requestControl(runId: RunId, action: string): Promise<number> {
    const row = await this.#run(() =>
      writeTransaction(this.statements, () => this.statements.requestControl.get(action, runId)),
    );
    if (!row) throw new UsageError("run_not_found", `run ${runId} does not exist`);
    return row.control_rev;
  }

  storageFault(): StorageError | undefined {
    if (this.#closed || !this.opened) return undefined;
    return fileChanged(this.location, this.opened);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      // Lets SQLite refresh its planner statistics when they are stale; cheap otherwise.
      this.db.run("pragma optimize");
    } catch {
      // Closing must not fail because the disk did.
    }
    this.statements.finalize();
    this.workQueue.finalize();
    this.messageStore.finalize();
    this.sqliteViews.finalize();
    this.sqliteRetention.finalize();
    await this.#destroyKysely();
    this.db.close();
  }

  #query(): Promise<KyselyQuery> {
    this.#kysely ??= openQuery(this.db);
    return this.#kysely;
  }

  async #destroyKysely(): Promise<void> {
    const q = this.#kysely;
    this.#kysely = undefined;
    if (q) await (await q.catch(() => undefined))?.db.destroy();
  }

  /**
   * Runs `fn` (a whole write transaction, run synchronously from BEGIN to
   * COMMIT, or a read), mapping storage failures. SQLITE_BUSY (another
   * process's lock: the connection does not wait itself) is waited out
   * within the busy timeout without stalling this process (busy.ts); a
   * write transaction that met it did nothing and runs again whole. Calls
   * made while one waits go after it, in the order they were made, as they
   * did when that wait blocked the whole process.
   */
  async #run<T>(fn: () => T | Promise<T>): Promise<T> {
    while (this.#waiting) await this.#waiting;
    this.#assertOpen();
    try {
      return await fn(); // the usual case: no lock to wait for
    } catch (err) {
      if (!isBusy(err)) throw this.#storageError(err);
    }
    const waited = retryBusy(fn, this.statements.busyTimeoutMs, true);
    const gate = waited.then(
      () => {},
      () => {},
    );
    this.#waiting = gate;
    try {
      return await waited;
    } catch (err) {
      throw this.#storageError(err);
    } finally {
      if (this.#waiting === gate) this.#waiting = undefined;
    }
  }

  #storageError(err: unknown): unknown {
    if (this.readOnly && !(err instanceof AtomicError) && String((err as { code?: unknown })?.code).startsWith("SQLITE_READONLY")) {
      return readOnlyRefusal(this.location, err);
    }
    return err instanceof AtomicError ? err : toStorageError(err, this.location);
  }

  /** A read through the Kysely layer (loaded on first use). */
  #kyselyRead<T>(fn: (q: KyselyQuery) => Promise<T>): Promise<T> {
    return this.#run(async () => fn(await this.#query()));
  }

  #assertOpen(): void {
    if (this.#closed) throw new Error(`the journal at ${this.location} is closed`);
  }
}

/**
 * WAL mode, foreign keys and the durability. Switching a new file to WAL
 * can find another process opening the same fresh file (its migration
 * under way): SQLite answers SQLITE_BUSY without waiting on its busy
 * handler, so the switch is retried here, within the busy timeout.
 */
async function configure(db: Database, path: string, durability: Durability, busyTimeoutMs: number): Promise<void> {
  if (path === MEMORY) {
    // One connection, nothing to survive: no log to share, no fsync (memory.ts).
    db.run("pragma foreign_keys = on");
    db.run("pragma synchronous = off");
    return;
  }
  const mode = await retryBusy(() => db.query<{ journal_mode: string }, []>("pragma journal_mode = wal").get()?.journal_mode, busyTimeoutMs);
  if (mode !== "wal") {
    throw new StorageError(
      "storage_unsupported",
      `the journal at ${path} cannot use write-ahead logging (journal mode is ${mode ?? "unknown"})`,
      { hint: "put --home on a local file system" },
    );
  }
  db.run("pragma foreign_keys = on");
  db.run(`pragma synchronous = ${durability === "normal" ? "normal" : "full"}`);
}
