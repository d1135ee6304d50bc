/**
 * What the Postgres work queue and message store need from the journal's
 * connection layer, and nothing more (a minimal driver interface: the
 * queue and the store take it in their constructors).
 *
 * - `run(fn)`: `fn` gets a query function on a pooled connection outside
 *   any explicit transaction (each statement commits on its own); storage
 *   failures are mapped, and a statement that failed with a serialization
 *   failure or a deadlock is run again whole.
 * - `transaction(fn)`: the same, inside BEGIN ... COMMIT on one
 *   connection (rolled back if `fn` throws; run again whole on a
 *   serialization failure or a deadlock).
 */

import type { RunId } from "../../shared/ids.ts";
import type { AppendEntry } from "../append.ts";
import type { Lease } from "../runs.ts";
import type { StageIndexEntry } from "../stage-index.ts";

export type PgQuery = <R = Record<string, unknown>>(text: string, values?: readonly unknown[]) => Promise<R[]>;

export interface PgSession {
  run<T>(fn: (q: PgQuery) => Promise<T>): Promise<T>;
  transaction<T>(fn: (q: PgQuery) => Promise<T>): Promise<T>;
}

/**
 * Now by the database clock, in ms since the epoch: the start of the
 * current statement, the same value wherever a statement uses it, so every
 * host judges lease expiry by one clock.
 */
export const NOW_MS = "(floor(extract(epoch from statement_timestamp()) * 1000)::bigint)";

/**
 * The driver's writes the message store makes inside its own transactions
 * with the journal's append code, so seqs stay gapless and the stage index
 * follows the same rules as an append's `stage`. Both run inside the
 * caller's transaction, after it checked the lease (and holds its row).
 */
export interface PgDriverWrites {
  /** Appends one entry of the lease's tree; throws unless it was appended. */
  appendInTransaction(q: PgQuery, lease: Lease, entry: AppendEntry): Promise<void>;
  /** The stage's row in the stage index follows this record (as an append's `stage` does). */
  upsertStage(q: PgQuery, rootId: RunId, runId: RunId, entry: StageIndexEntry): Promise<void>;
}
