/**
 * Leases on root runs, on Postgres. The same state machine as on SQLite
 * (../sqlite/leases.ts): absent → held (epoch 1) → renewed → released or
 * expired or orphaned → taken over (epoch + 1); every write names the epoch
 * it holds.
 *
 * What differs here, because several hosts share the database:
 * - Acquire reads the lease row FOR UPDATE and decides while holding it, to
 *   the commit: a second acquirer waits on the row and then sees the first
 *   one's lease. An absent row is inserted with ON CONFLICT DO NOTHING; the
 *   loser of that race reads the winner's row (locked) and decides again.
 *   An append holds the same row FOR SHARE (append-sql.ts), so a takeover
 *   cannot slip between an append's lease check and its insert.
 * - Expiry is judged by the database clock (NOW_MS), never by a host's:
 *   renewed_at is written with it too.
 * - A holder is presumed dead before expiry only when it is a process of
 *   this very host (same host identity: machine, boot, pid namespace) that
 *   no longer exists; a holder on another host waits out its lease.
 * - Lease writes commit with synchronous_commit off (the reasoning of the
 *   SQLite file note holds: a lease matters only while its holder lives;
 *   the holder's first durable append flushes the WAL, this write with it).
 */

import { LeaseHeldError, LeaseLostError } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import { isLocalHolderDead, isLocalHolderRunning } from "../../shared/process-info.ts";
import type { AcquireOptions } from "../journal.ts";
import type { HolderInfo, Lease } from "../runs.ts";
import type { PgConnection } from "./connection.ts";
import { NOW_MS } from "./store-session.ts";
import { leaseFromRow, type LeasesTable } from "../sqlite/tables.ts";

/** A lease row, with the database clock's reading of the statement that read it. */
interface LeaseRow extends LeasesTable {
  now: number;
}

export async function acquireLease(conn: PgConnection, rootId: RunId, holder: HolderInfo, opts: AcquireOptions): Promise<Lease> {
  return conn.transaction(
    async (c) => {
      const h = [holder.holderId, holder.host, holder.pid, holder.pidStart];
      for (;;) {
        const row = (await c.query<LeaseRow>({ name: "lease-lock", text: `select *, ${NOW_MS} as now from leases where run_id = $1 for update`, values: [rootId] })).rows[0];
        if (!row) {
          const inserted = await c.query<LeaseRow>({
            name: "lease-insert",
            text: `insert into leases (run_id, holder_id, host, pid, pid_start, epoch, renewed_at, timeout_ms, released)
                   values ($1, $2, $3, $4, $5, 1, ${NOW_MS}, $6, 0) on conflict (run_id) do nothing returning *`,
            values: [rootId, ...h, opts.timeoutMs],
          });
          if (inserted.rows[0]) return leaseFromRow(inserted.rows[0]);
          continue; // another process inserted it meanwhile: decide on its row
        }
        if (row.holder_id === holder.holderId && !row.released) {
          const renewed = await c.query<LeaseRow>({
            name: "lease-reacquire",
            text: `update leases set renewed_at = ${NOW_MS}, timeout_ms = $2 where run_id = $1 returning *`,
            values: [rootId, opts.timeoutMs],
          });
          return leaseFromRow(renewed.rows[0]!);
        }
        // Expired by the database's clock, yet held by a process of this host that visibly still runs: not free (sqlite/leases.ts).
        const local = { host: row.host, pid: row.pid, pidStart: row.pid_start };
        const free = row.released === 1 || (row.renewed_at + row.timeout_ms < row.now && !isLocalHolderRunning(local)) || isLocalHolderDead(local);
        if (!free && !opts.force) throw new LeaseHeldError(rootId, { holderId: row.holder_id, host: row.host, pid: row.pid });
        const taken = await c.query<LeaseRow>({
          name: "lease-takeover",
          text: `update leases set holder_id = $2, host = $3, pid = $4, pid_start = $5, epoch = epoch + 1,
                                   renewed_at = ${NOW_MS}, timeout_ms = $6, released = 0
                  where run_id = $1 and epoch = $7 returning *`,
          values: [rootId, ...h, opts.timeoutMs, row.epoch],
        });
        return leaseFromRow(taken.rows[0]!);
      }
    },
    { synchronousCommit: false },
  );
}

/**
 * One statement: its implicit transaction commits without waiting for the
 * WAL flush (set_config's local setting lasts until that commit).
 */
export async function renewLease(conn: PgConnection, lease: Lease): Promise<Lease> {
  const rows = await conn.query<{ renewed_at: number }>(
    `update leases set renewed_at = ${NOW_MS}, timeout_ms = $2
       from (select set_config('synchronous_commit', 'off', true)) as async_commit
      where run_id = $1 and holder_id = $3 and epoch = $4 and released = 0
      returning renewed_at`,
    [lease.rootId, lease.timeoutMs, lease.holderId, lease.epoch],
    "lease-renew",
  );
  if (!rows[0]) throw new LeaseLostError(lease.rootId, lease.epoch);
  return { ...lease, renewedAt: rows[0].renewed_at };
}

/** A lease that was already lost is not ours to release: nothing to do. */
export async function releaseLease(conn: PgConnection, lease: Lease): Promise<void> {
  await conn.query(
    `update leases set released = 1
       from (select set_config('synchronous_commit', 'off', true)) as async_commit
      where run_id = $1 and holder_id = $2 and epoch = $3 and released = 0`,
    [lease.rootId, lease.holderId, lease.epoch],
    "lease-release",
  );
}

/** The current lease, or undefined when nobody holds it (never taken, or released). */
export async function getLease(conn: PgConnection, rootId: RunId): Promise<Lease | undefined> {
  const rows = await conn.query<LeaseRow>(`select *, ${NOW_MS} as now from leases where run_id = $1 and released = 0`, [rootId], "lease-get-now");
  // With the database clock's reading: expiry is judged by it (run-status.ts), not by the reader's clock.
  return rows[0] ? { ...leaseFromRow(rows[0]), readAt: Number(rows[0].now) } : undefined;
}

/** The database clock, the one that judges leases here (and a durable sleep's wake-up: engine/steps/sleep.ts). */
export async function databaseNow(conn: PgConnection): Promise<number> {
  const rows = await conn.query<{ now: number }>(`select ${NOW_MS} as now`, [], "clock-now");
  return Number(rows[0]!.now);
}
