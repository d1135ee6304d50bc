/**
 * The Postgres journal's connection layer: one `pg` pool per open journal,
 * every connection's search_path set to the journal's schema, and one place
 * where driver errors become atomic errors.
 *
 * Driver: `pg` (node-postgres) with Kysely's PostgresDialect for the query
 * builder. Both pg and postgres.js work in the compiled binary (docs/design/platform.md).
 * Measured here (Postgres 15, localhost, 2 loaded cores, Bun 1.4.4): a
 * prepared single-row INSERT commit through one pg client about
 * 2,100/s; through `pool.query` (a checkout per statement) about 600/s, so
 * hot paths hold a client. pg was chosen because it is the driver Kysely
 * ships a dialect for (no third-party adapter to keep in step with Kysely),
 * reads PGPASSWORD and ~/.pgpass itself as libpq does, and exposes TLS
 * options as Node's tls module takes them (sslmode mapping in url.ts).
 * What an append costs is round trips, not the driver: so the append is one
 * statement (a function in the schema, migrations.ts), not one per row.
 *
 * Transactions (`transaction`): BEGIN ... COMMIT on one client; a
 * serialization failure or deadlock (40001, 40P01) rolls back and runs the
 * whole function again (up to 5 times); anything else rolls back and
 * throws. Connection loss before COMMIT was sent means the transaction
 * did not happen: retried with backoff within `retryMs`, then
 * `storage_unavailable`.
 *
 * The retry window is the outage's, not each statement's (`mayRetry`): it
 * starts at the first lost connection of this journal and ends `retryMs`
 * later for every statement, whenever each began (a write that began when
 * the window was nearly over gets what is left of it, not a window of its
 * own), and a success anywhere ends the outage. So a run whose database
 * stays away stops `retryMs` after the first failure plus the statement
 * under way then, whatever number of writes it had queued.
 * An outage that lasts ANNOUNCE_AFTER_MS is told on stderr (one line, and
 * one when the server answers again), so a person or a service log sees
 * why nothing moves. `stopRetrying` ends the window at once (the process is stopping:
 * SIGTERM or Ctrl-C during an outage must not wait for it). Loss while COMMIT is under way leaves the outcome
 * unknown: `storage_unavailable` at once (the append path resolves that
 * itself with batch ids, append.ts).
 */

import pg from "pg";
import { AtomicError, StorageError } from "../../shared/errors.ts";
import { backoffDelay, type Backoff } from "../../shared/backoff.ts";
import type { PostgresTarget } from "./url.ts";
import { readEnv } from "../../shared/config/environment.ts";
import { writeStderr } from "../../shared/raw-stderr.ts";

/** bigint (int8) and numeric (sums) as JS numbers: every value here (ms times, counters, tokens) fits in 2^53. */
const TYPES = {
  getTypeParser(oid: number, format?: "text" | "binary") {
    if (oid === 20 || oid === 1700) return (v: string) => (v === null ? null : Number(v));
    return pg.types.getTypeParser(oid, format);
  },
};

export type Client = pg.PoolClient;

const RETRY_SQLSTATES = new Set(["40001", "40P01"]);
/** After a lost connection (every retry of this journal's statements): a restarting server is back in a second or two. */
export const RECONNECT_BACKOFF: Backoff = { firstMs: 100, maxMs: 2_000, jitter: 0.5 };
/** After a serialization failure or deadlock: the other transaction is done in milliseconds. */
const CONFLICT_BACKOFF: Backoff = { firstMs: 10, maxMs: 200, jitter: 0.5 };
const MAX_CONFLICT_RETRIES = 5;
/** An outage is told on stderr once it lasted this long: a server restart is usually over sooner and goes unmentioned. */
const ANNOUNCE_AFTER_MS = 2_000;

/** How long writes retry after the connection was lost: ATOMIC_JOURNAL_RETRY_MS, or its default (JOURNAL_RETRY_MS, with its reason). */
const DEFAULT_RETRY_MS = readEnv("ATOMIC_JOURNAL_RETRY_MS");

export interface PgPoolOptions {
  max?: number;
  /** How long a write keeps retrying after the connection was lost (ms). */
  retryMs?: number;
}

export class PgConnection {
  readonly pool: pg.Pool;
  readonly retryMs: number;
  /** How every connection of this journal connects (the pool's, and a listener's of its own). */
  private readonly clientConfig: pg.ClientConfig;
  #closed = false;
  /** When this journal first lost its connection in the current outage (undefined: no outage now). */
  #lostSince: number | undefined;
  /** Whether this outage was told on stderr (once it lasted ANNOUNCE_AFTER_MS). */
  #announced = false;
  /** Set by stopRetrying: no statement is tried again after a lost connection. */
  #noRetries = false;
  /** Wakes the backoff sleeps when stopRetrying is called. */
  #wake = new AbortController();

  constructor(
    readonly target: PostgresTarget,
    opts: PgPoolOptions = {},
    /** The TLS options to connect with (null: none), when not the target's (sslmode allow falls back). */
    tls: PostgresTarget["tls"] | null = target.tls,
  ) {
    this.retryMs = opts.retryMs ?? DEFAULT_RETRY_MS;
    this.clientConfig = {
      host: target.host,
      port: target.port,
      user: target.user,
      database: target.database,
      ...(target.password !== undefined ? { password: target.password } : {}),
      ssl: tls ?? false,
      application_name: target.applicationName,
      connectionTimeoutMillis: target.connectTimeoutMs,
      options: `-c search_path=${target.schema}`,
      types: TYPES,
    };
    this.pool = new pg.Pool({
      ...this.clientConfig,
      max: opts.max ?? 8,
      idleTimeoutMillis: 10_000,
      allowExitOnIdle: true,
    });
    // An idle client whose server went away: the pool drops it; the next checkout connects anew.
    this.pool.on("error", () => {});
    // A checked-out client whose server went away also emits "error" (pg: after failing its queries, which is how
    // the caller learns of it): without a listener that is an uncaught exception in whatever process holds it.
    this.pool.on("connect", (client) => client.on("error", () => {}));
  }

  /** A connection outside the pool, the caller's to connect and end (LISTEN holds one for as long as it listens). */
  newClient(): pg.Client {
    return new pg.Client(this.clientConfig);
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Whether the connection is lost now (a statement failed on it and none has succeeded since). */
  get inOutage(): boolean {
    return this.#lostSince !== undefined;
  }

  /**
   * Whether a statement that failed with `err` may be tried again: a lost
   * connection, within the outage's window (see the file note), while the
   * journal is open and retries are allowed.
   */
  mayRetry(err: unknown): boolean {
    if (!isConnectionLoss(err)) return false;
    const now = Date.now();
    this.#lostSince ??= now;
    const retry = !this.#closed && !this.#noRetries && now < this.#lostSince + this.retryMs;
    if (retry && !this.#announced && now - this.#lostSince >= ANNOUNCE_AFTER_MS) {
      this.#announced = true;
      const left = Math.max(1, Math.round((this.#lostSince + this.retryMs - now) / 1000));
      writeStderr(`atomic: the journal's Postgres at ${this.target.host}:${this.target.port} is unreachable (${describe(err)}); retrying for up to ${left} s more\n`);
    }
    return retry;
  }

  /** A statement went through: the outage, if there was one, is over. */
  recovered(): void {
    if (this.#lostSince === undefined) return;
    if (this.#announced) writeStderr(`atomic: the journal's Postgres at ${this.target.host}:${this.target.port} is reachable again\n`);
    this.#lostSince = undefined;
    this.#announced = false;
  }

  /** Waits before the next attempt after a lost connection: the backoff, cut short by the window's end or stopRetrying. */
  async backoff(attempt: number): Promise<void> {
    const left = this.#lostSince === undefined ? Infinity : this.#lostSince + this.retryMs - Date.now();
    const ms = Math.max(0, Math.min(backoffDelay(RECONNECT_BACKOFF, attempt), left));
    if (this.#wake.signal.aborted) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.#wake.signal.addEventListener("abort", done, { once: true });
    });
  }

  /** No more retries after a lost connection (the process is stopping); a statement that fails from now on fails at once. */
  stopRetrying(): void {
    this.#noRetries = true;
    this.#wake.abort();
  }

  /** One statement on any pooled client (reads, single-statement writes). */
  async query<R extends pg.QueryResultRow>(text: string, values: unknown[] = [], name?: string): Promise<R[]> {
    return this.withClient(async (c) => (await c.query<R>(name ? { name, text, values } : { text, values })).rows);
  }

  /** A pooled client for `fn`, retried on a lost connection within retryMs when `fn` may run again (`idempotent`). */
  async withClient<T>(fn: (c: Client) => Promise<T>, idempotent = true): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      let client: Client | undefined;
      try {
        client = await this.pool.connect();
        const out = await fn(client);
        client.release();
        this.recovered();
        return out;
      } catch (err) {
        const lost = isConnectionLoss(err);
        client?.release(lost ? (err as Error) : undefined);
        if (!this.mayRetry(err) || !idempotent) throw this.mapError(err);
        await this.backoff(attempt);
      }
    }
  }

  /**
   * `fn` inside BEGIN ... COMMIT (see the file note for retries). `fn` may
   * run more than once: it must not have effects outside the transaction.
   */
  async transaction<T>(fn: (c: Client) => Promise<T>, opts: { synchronousCommit?: boolean } = {}): Promise<T> {
    for (let conflicts = 0; ; conflicts++) {
      try {
        return await this.withClient(async (c) => {
          let committing = false;
          try {
            // One round trip for both (a simple query may hold several statements).
            await c.query(opts.synchronousCommit === false ? "begin; set local synchronous_commit = off" : "begin");
            const out = await fn(c);
            committing = true;
            await c.query("commit");
            return out;
          } catch (err) {
            if (committing && isConnectionLoss(err)) throw new CommitUnknown(err);
            if (!isConnectionLoss(err)) await c.query("rollback").catch(() => {});
            throw err;
          }
        });
      } catch (err) {
        if (sqlState(err) && RETRY_SQLSTATES.has(sqlState(err)!) && conflicts < MAX_CONFLICT_RETRIES) {
          await Bun.sleep(backoffDelay(CONFLICT_BACKOFF, conflicts));
          continue;
        }
        throw err instanceof CommitUnknown ? this.mapError(err.cause) : err;
      }
    }
  }

  /** A driver error as an atomic error (AtomicErrors pass through). */
  mapError(err: unknown): unknown {
    if (err instanceof AtomicError) return err;
    if (isConnectionLoss(err)) {
      const how = this.#noRetries ? "while this process was stopping" : `for more than ${Math.round(this.retryMs / 1000)} s`;
      return new StorageError("storage_unavailable", `lost the connection to the journal's Postgres at ${this.target.location} ${how} (${describe(err)})`, {
        hint: `check that the Postgres server at ${this.target.host}:${this.target.port} is up and reachable from this machine, then resume the run`,
        cause: err,
        stopsRun: true,
      });
    }
    return err;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.pool.end().catch(() => {});
  }
}

/** A COMMIT whose outcome is unknown (the connection broke while it was under way). */
class CommitUnknown extends Error {
  constructor(override readonly cause: unknown) {
    super("the connection broke during COMMIT");
  }
}


export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

const LOSS_ERRNOS = new Set(["ECONNRESET", "ECONNREFUSED", "EPIPE", "ETIMEDOUT", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "ECONNABORTED"]);

/**
 * The server or the network went away (as opposed to a statement that
 * failed): socket errors, the driver's "Connection terminated", and the
 * server's own shutdown and admin-termination codes (57P01-57P03: a
 * restart, pg_terminate_backend), 08xxx connection exceptions.
 */
export function isConnectionLoss(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const state = sqlState(err);
  if (state) return state.startsWith("08") || state === "57P01" || state === "57P02" || state === "57P03";
  const code = (err as { code?: unknown }).code;
  if (typeof code === "string" && LOSS_ERRNOS.has(code)) return true;
  return /Connection terminated|connection timeout|Client has encountered a connection error|not queryable|timeout exceeded when trying to connect/i.test(err.message);
}

export function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: unknown }).code;
  return typeof code === "string" && !err.message.includes(code) ? `${err.message}, ${code}` : err.message;
}
