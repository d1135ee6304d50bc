/**
 * The seam between the journal's connection layer and the Postgres work
 * queue and message store (work-queue.ts, messages.ts): `session(conn)` is
 * the minimal driver interface they take (store-session.ts: a query
 * function outside or inside a transaction, failures mapped, conflicts
 * retried), `driverWrites` the journal's append code for their fenced
 * writes inside their own transactions, and `makeStores` builds both for a
 * journal.
 */

import { UsageError } from "../../shared/errors.ts";
import type { MessageStore } from "../messages.ts";
import type { WorkQueue } from "../work-queue.ts";
import { appendInTransaction, encodeStage } from "./append.ts";
import type { Client, PgConnection } from "./connection.ts";
import { PgMessageStore } from "./messages.ts";
import { NOW_MS, type PgDriverWrites, type PgQuery, type PgSession } from "./store-session.ts";
import { PgWorkQueue } from "./work-queue.ts";

/**
 * Each statement is named by its text, so a connection parses and plans it
 * once and then only binds it (pg keeps named statements prepared per
 * connection): the queue's claim is one long statement per stage.
 */
function queryOf(c: Client): PgQuery {
  return async <R,>(text: string, values: readonly unknown[] = []) =>
    (await c.query({ name: `s${Bun.hash(text).toString(36)}`, text, values: values as unknown[] })).rows as R[];
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
  const s = session(conn);
  return { work: new PgWorkQueue(s), messages: new PgMessageStore(s, driverWrites) };
}
