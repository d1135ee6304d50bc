/**
 * The seam between the journal's connection layer and the Postgres work
 * queue and message store (written next to this, by their own files):
 * `session(conn)` is what they get (a query function outside or inside a
 * transaction, failures mapped, conflicts retried), `driverWrites` the
 * journal's append code for their fenced writes inside their own
 * transactions, and `makeStores` builds them for a journal.
 */

import { UsageError } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import type { AppendEntry, Lease, MessageStore, StageIndexEntry, WorkQueue } from "../types.ts";
import { appendInTransaction, encodeStage } from "./append.ts";
import type { Client, PgConnection } from "./connection.ts";
import { NOW_MS } from "./leases.ts";
import { PgMessageStore } from "./messages.ts";
import { PgWorkQueue } from "./work-queue.ts";

export type PgQuery = <R = Record<string, unknown>>(text: string, values?: readonly unknown[]) => Promise<R[]>;

export interface PgSession {
  run<T>(fn: (q: PgQuery) => Promise<T>): Promise<T>;
  transaction<T>(fn: (q: PgQuery) => Promise<T>): Promise<T>;
}

export interface PgDriverWrites {
  /** Appends one entry of the lease's tree inside the caller's transaction; throws unless it was appended. */
  appendInTransaction(q: PgQuery, lease: Lease, entry: AppendEntry): Promise<void>;
  /** The stage's row in the stage index follows this record (as an append's `stage` does). */
  upsertStage(q: PgQuery, rootId: RunId, runId: RunId, entry: StageIndexEntry): Promise<void>;
}

function queryOf(c: Client): PgQuery {
  return async <R,>(text: string, values: readonly unknown[] = []) => (await c.query(text, values as unknown[])).rows as R[];
}

export function session(conn: PgConnection): PgSession {
  return {
    run: (fn) => conn.withClient((c) => fn(queryOf(c))),
    transaction: (fn) => conn.transaction((c) => fn(queryOf(c))),
  };
}

export const driverWrites: PgDriverWrites = {
  async appendInTransaction(q, lease, entry) {
    const [outcome] = await appendInTransaction((text, values) => q(text, values), lease, [entry]);
    if (outcome?.status !== "appended") {
      throw new UsageError("append_refused", `could not record ${entry.type} for run ${entry.runId}: ${outcome?.status === "error" ? outcome.error.message : outcome?.status}`);
    }
  },
  async upsertStage(q, rootId, runId, g) {
    await q(`select upsert_stage($1, $2, $3::jsonb, ${NOW_MS})`, [rootId, runId, JSON.stringify(encodeStage(g))]);
  },
};

export function makeStores(conn: PgConnection): { work: WorkQueue; messages: MessageStore } {
  const db = session(conn);
  return { work: new PgWorkQueue(db), messages: new PgMessageStore(db, driverWrites) };
}
