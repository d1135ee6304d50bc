/**
 * The Postgres journal: every atomic process of every host that points at
 * the same database and schema shares it (`--journal postgres://…`).
 *
 * Design notes (the files of this folder, each with its own header):
 * - url.ts: the URL, its parameters and defaults as libpq reads them;
 *   the password is never shown (`location`).
 * - connection.ts: the driver (pg, with Kysely's PostgresDialect for
 *   listings; why pg, and the measurements), transactions, retries and
 *   the mapping of connection loss to `storage_unavailable`.
 * - migrations.ts: the versioned schema, applied under an advisory lock;
 *   a newer schema is refused before anything is written.
 * - append-sql.ts / append.ts: the append as one database function call
 *   (lease FOR SHARE, a subtransaction per entry when one is bad, change
 *   clock, batch receipts that make a retry after a lost COMMIT safe).
 * - leases.ts: leases judged by the database clock, the row FOR UPDATE
 *   while deciding, no local-pid shortcut for a holder on another host.
 * - reads.ts: a run by id, replay, status views (with retention's
 *   tombstones); pg-listings.ts: run listings through Kysely, a bundle of
 *   its own loaded on first use.
 * - retention.ts: deleting finished trees (locks, the database clock's
 *   judgement of a lease), VACUUM outside transactions.
 * - schedules.ts: schedules, the tick claim as a compare-and-set.
 * - code.ts: the workflow code runs are pinned to.
 * - artifacts.ts: the artifact store (stage files in chunks, capped), so
 *   every host reads what a worker host ran.
 * - open-errors.ts: why opening failed, in one sentence and a hint.
 *
 * The work queue and the message store are
 * separate classes over the same connection (`session`, stores.ts).
 *
 * This module is a bundle of its own in the binary
 * (shared/entry-points.ts): a process on the embedded journal never loads
 * pg or this code.
 */

import type { StorageError } from "../../shared/errors.ts";
import { UsageError } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import type { AppendEntry, AppendOutcome } from "../append.ts";
import type { AcquireOptions, Durability, Journal, ListRunsFilter } from "../journal.ts";
import type { MessageStore } from "../messages.ts";
import type { RunRetention } from "../retention.ts";
import type { HolderInfo, JournalEvent, Lease, RunRecord } from "../runs.ts";
import type { JournalViews } from "../views.ts";
import type { WorkQueue } from "../work-queue.ts";
import type { ScheduleStore } from "../schedules.ts";
import { appendEntries } from "./append.ts";
import { PgArtifactStore } from "./artifacts.ts";
import type { ArtifactStore } from "../../artifacts/store.ts";
import { PgConnection } from "./connection.ts";
import * as leases from "./leases.ts";
import { LATEST_SCHEMA_VERSION, migrate, readVersion, refuseIfTooNew } from "./migrations.ts";
import { openError } from "./open-errors.ts";
import { PgViews, getRun, readEvents } from "./reads.ts";
import { importEntry } from "../../shared/entry-points.ts";
import { PgRetention } from "./retention.ts";
import { PgScheduleStore } from "./schedules.ts";
import { PgCodeStore } from "./code.ts";
import { PgTagStore } from "./tags.ts";
import type { RunTagStore } from "../tags.ts";
import { PgCounters } from "./counters.ts";
import type { JournalCounters } from "../counters.ts";
import type { CodeStore } from "../code.ts";
import { PgFleet } from "./fleet.ts";
import type { FleetStore } from "../fleet.ts";
import { makeStores, session } from "./stores.ts";
import { parsePostgresUrl, redactUrl, type PostgresTarget } from "./url.ts";
import { type EnvSource } from "../../shared/config/environment.ts";

export interface PostgresJournalOptions {
  durability?: Durability;
  /** How long a write keeps retrying after the connection was lost (ms). */
  retryMs?: number;
  env?: EnvSource;
}

type ListingsModule = typeof import("./pg-listings.ts");
type Listings = { module: ListingsModule; db: ReturnType<ListingsModule["kyselyOver"]> };

/** Receipts of append calls older than this are deleted (a retry comes within seconds). */
const BATCH_RECEIPT_MS = 24 * 3600_000;

/**
 * Opening a journal at this version ($2) in one statement: its version read, and receipts older than $1
 * deleted only when the version is $2 (a newer atomic's schema is never altered). Fails when there is no
 * journal's `meta` in the schema (the connection's search_path), or for a user who may not delete.
 */
const OPEN_SQL = `with pruned as (delete from append_batches where at < $1 and exists (select from meta where key = 'schema_version' and value = $2))
  select value from meta where key = 'schema_version'`;

export class PostgresJournal implements Journal {
  readonly location: string;
  readonly views: JournalViews;
  readonly work: WorkQueue;
  readonly messages: MessageStore;
  readonly retention: RunRetention;
  readonly schedules: ScheduleStore;
  readonly code: CodeStore;
  readonly tags: RunTagStore;
  readonly counters: JournalCounters;
  readonly fleet: FleetStore;
  #listings: Promise<Listings> | undefined;
  #closed = false;

  private constructor(
    readonly conn: PgConnection,
    private readonly durability: Durability,
  ) {
    this.location = conn.target.location;
    this.views = new PgViews(conn);
    const stores = makeStores(conn);
    this.work = stores.work;
    this.messages = stores.messages;
    this.retention = new PgRetention(conn);
    this.schedules = new PgScheduleStore(session(conn));
    this.code = new PgCodeStore(session(conn));
    this.tags = new PgTagStore(session(conn));
    this.counters = new PgCounters(session(conn));
    this.fleet = new PgFleet(session(conn), conn, conn.target.schema);
  }

  /** Connects, checks the schema (refusing a newer one), migrates if needed. Errors are one sentence and a hint. */
  static async open(url: string, opts: PostgresJournalOptions = {}): Promise<PostgresJournal> {
    const target = parsePostgresUrl(url, opts.env);
    const conn = await connect(target, opts.retryMs);
    try {
      const c = await conn.pool.connect();
      try {
        const prunedBefore = Date.now() - BATCH_RECEIPT_MS;
        // The usual open, a journal at this version: one round trip. Else (none yet, older, newer, not ours, a
        // user who may only read) the careful way, each step on its own.
        const quick = await c.query<{ value: string }>({ name: "open-journal", text: OPEN_SQL, values: [prunedBefore, String(LATEST_SCHEMA_VERSION)] }).then(
          (r) => r.rows[0]?.value,
          () => undefined,
        );
        if (quick !== String(LATEST_SCHEMA_VERSION)) {
          const version = await readVersion(c, target.schema);
          refuseIfTooNew(version, target.location);
          if (version < LATEST_SCHEMA_VERSION) await migrate(c, target.schema, target.location, target.user, target.database);
          // Housekeeping, best effort: a user who may only read (runs, show) opens the journal all the same.
          await c.query("delete from append_batches where at < $1", [prunedBefore]).catch(() => {});
        }
      } finally {
        c.release();
      }
    } catch (err) {
      await conn.close();
      throw openError(err, target);
    }
    return new PostgresJournal(conn, opts.durability ?? "full");
  }

  acquireLease(rootId: RunId, holder: HolderInfo, opts: AcquireOptions): Promise<Lease> {
    return leases.acquireLease(this.conn, rootId, holder, opts);
  }

  renewLease(lease: Lease): Promise<Lease> {
    return leases.renewLease(this.conn, lease);
  }

  releaseLease(lease: Lease): Promise<void> {
    return leases.releaseLease(this.conn, lease);
  }

  getLease(rootId: RunId): Promise<Lease | undefined> {
    return leases.getLease(this.conn, rootId);
  }

  clockNow(): Promise<number> {
    return leases.databaseNow(this.conn);
  }

  append(lease: Lease, entries: AppendEntry[]): Promise<AppendOutcome[]> {
    return appendEntries(this.conn, this.durability, lease, entries);
  }

  getRun(id: RunId): Promise<RunRecord | undefined> {
    return this.#read(() => getRun(this.conn, id));
  }

  findRuns(prefix: string, limit: number): Promise<RunRecord[]> {
    return this.#listed((l) => l.module.findRuns(l.db, prefix, limit));
  }

  listRuns(filter?: ListRunsFilter): Promise<RunRecord[]> {
    return this.#listed((l) => l.module.listRuns(l.db, filter));
  }

  countRuns(filter?: ListRunsFilter): Promise<number> {
    return this.#listed((l) => l.module.countRuns(l.db, filter));
  }

  /** A listing through Kysely, its bundle loaded on first use (pg-listings.ts). */
  async #listed<T>(fn: (l: Listings) => Promise<T>): Promise<T> {
    this.#listings ??= importEntry("journal/postgres/pg-listings.ts").then((m) => {
      const module = m as unknown as ListingsModule;
      return { module, db: module.kyselyOver(this.conn.pool) };
    });
    const listings = await this.#listings;
    return this.#read(() => fn(listings));
  }

  readEvents(runId: RunId, afterSeq?: number, limit?: number): Promise<JournalEvent[]> {
    return readEvents(this.conn, runId, afterSeq, limit);
  }

  async requestControl(runId: RunId, action: string): Promise<number> {
    const rows = await this.conn.query<{ control_rev: number }>(
      "update runs set control = $1, control_rev = control_rev + 1 where id = $2 returning control_rev",
      [action, runId],
      "request-control",
    );
    if (!rows[0]) throw new UsageError("run_not_found", `run ${runId} does not exist`);
    return rows[0].control_rev;
  }

  /** The artifact store in this database (../../artifacts/select.ts decides whether a process uses it). */
  artifactStore(opts: { maxFileBytes: number }): ArtifactStore {
    return new PgArtifactStore(session(this.conn), this.location, opts.maxFileBytes);
  }

  /** The process is stopping: a lost connection is not waited for any more (connection.ts, stopRetrying). */
  stopWaiting(): void {
    this.conn.stopRetrying();
  }

  /** Nothing to stat: a server that went away shows as storage_unavailable on the next write. */
  storageFault(): StorageError | undefined {
    return undefined;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.conn.close();
  }

  /** A Kysely read, retried on a lost connection (reads have no effects), its failures mapped. */
  async #read<T>(fn: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        const out = await fn();
        this.conn.recovered();
        return out;
      } catch (err) {
        if (!this.conn.mayRetry(err)) throw this.conn.mapError(err);
        await this.conn.backoff(attempt);
      }
    }
  }
}

/** `doctor`'s look at a Postgres journal: connects, reads the server's and the schema's versions, writes nothing. */
export async function probePostgres(url: string): Promise<{ location: string; ok: boolean; detail: string; problem?: string; hint?: string }> {
  let location = redactUrl(url);
  try {
    const target = parsePostgresUrl(url);
    location = target.location;
    const conn = await connect(target, 0);
    try {
      const c = await conn.pool.connect();
      try {
        const server = (await c.query<{ v: string }>("select current_setting('server_version') as v")).rows[0]?.v ?? "?";
        const tls = (await c.query<{ ssl: boolean }>("select coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false) as ssl")).rows[0]?.ssl;
        const version = await readVersion(c, target.schema);
        refuseIfTooNew(version, target.location);
        const schema = version === 0 ? `schema ${target.schema} not created yet` : `schema ${target.schema} at version ${version}`;
        return { location, ok: true, detail: `Postgres ${server}${tls ? " over TLS" : ""}, ${schema}` };
      } finally {
        c.release();
      }
    } finally {
      await conn.close();
    }
  } catch (err) {
    const e = openError(err, parsePostgresUrlOrUndefined(url));
    return { location, ok: false, detail: "", problem: e.message, ...(e.hint ? { hint: e.hint } : {}) };
  }
}

function parsePostgresUrlOrUndefined(url: string): PostgresTarget {
  try {
    return parsePostgresUrl(url);
  } catch {
    return { host: "?", port: 0, user: "?", password: undefined, database: "?", schema: "?", sslMode: "prefer", tls: undefined, applicationName: "atomic", connectTimeoutMs: 0, location: redactUrl(url) };
  }
}

/**
 * The pool, once one connection worked. sslmode prefer (the default) and
 * allow fall back as libpq does, with pg's `ssl` option: prefer connects
 * with TLS and, when the server has none, again without (a refused first
 * connection, a few ms, once per process); allow connects without and,
 * when the server insists, again with TLS. The pool keeps what worked.
 */
async function connect(target: PostgresTarget, retryMs: number | undefined): Promise<PgConnection> {
  const attempts: (PostgresTarget["tls"] | null)[] =
    target.sslMode === "allow" ? [null, { rejectUnauthorized: false }] : target.sslMode === "prefer" ? [target.tls ?? null, null] : [target.tls ?? null];
  let last: unknown;
  for (const tls of attempts) {
    const conn = new PgConnection(target, retryMs === undefined ? {} : { retryMs }, tls);
    try {
      const c = await conn.pool.connect();
      c.release();
      return conn;
    } catch (err) {
      await conn.close();
      last = err;
      const message = err instanceof Error ? err.message : "";
      const fallBack = /does not support SSL/i.test(message) || (target.sslMode === "allow" && /no pg_hba\.conf entry.*no encryption/i.test(message));
      if (!fallBack) break;
    }
  }
  throw openError(last, target);
}
