/**
 * Leases on root runs.
 *
 * A lease row moves through: absent → held (epoch 1) → renewed (same epoch)
 * → released or expired or orphaned (its holder, a process of this host,
 * is gone) → taken over (epoch + 1) → ... The epoch only grows, and every
 * append, renewal and release names the epoch it holds, so a holder whose
 * lease was taken over is refused on its next write (fencing).
 *
 * Acquire decides inside one IMMEDIATE transaction, so two processes racing
 * for the same lease are serialized: exactly one wins, the other sees the
 * winner's live lease and gets LeaseHeldError naming it.
 *
 * Lease writes commit without waiting for the disk (synchronous=NORMAL for
 * their transaction, whatever the journal's durability): a lease matters
 * only while its holder lives, and a power cut ends every holder. A lease
 * acquired and lost to one was used for nothing durable: its holder's first
 * durable append syncs the write-ahead log, this acquisition included. A
 * lost renewal or release leaves a lease whose holder no longer exists,
 * which the next acquire takes over at once. Saves two fsyncs per run.
 */

import { LeaseHeldError, LeaseLostError } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import { isLocalHolderDead, isLocalHolderRunning } from "../../shared/process-info.ts";
import type { AcquireOptions } from "../journal.ts";
import type { HolderInfo, Lease } from "../runs.ts";
import { writeTransaction, type Statements } from "./statements.ts";
import { leaseFromRow, type LeasesTable } from "./tables.ts";

export function acquireLease(s: Statements, rootId: RunId, holder: HolderInfo, opts: AcquireOptions): Lease {
  return leaseTransaction(s, () => {
    const now = Date.now();
    const row = s.selectLease.get(rootId);
    const mine = (epoch: number): Lease => ({ ...holder, rootId, epoch, renewedAt: now, timeoutMs: opts.timeoutMs });

    if (!row) {
      s.insertLease.run(rootId, holder.holderId, holder.host, holder.pid, holder.pidStart, now, opts.timeoutMs);
      return mine(1);
    }
    if (row.holder_id === holder.holderId && !row.released) {
      s.renewLease.run(now, opts.timeoutMs, rootId, holder.holderId, row.epoch);
      return mine(row.epoch);
    }
    if (!isFree(row, now) && !opts.force) {
      throw new LeaseHeldError(rootId, { holderId: row.holder_id, host: row.host, pid: row.pid });
    }
    s.takeOverLease.run(
      holder.holderId,
      holder.host,
      holder.pid,
      holder.pidStart,
      now,
      opts.timeoutMs,
      rootId,
      row.epoch,
    );
    return mine(row.epoch + 1);
  });
}

/**
 * Released, expired, or held by a process of this host that no longer
 * exists. Expired by the clocks, but held by a process of this host that
 * visibly still runs (same pid and start time, not stopped): not free,
 * whatever the clocks say (its renewals carry its own clock, which may
 * differ from ours; it fences itself by a monotonic deadline); `runs`
 * judges the same way (../run-status.ts).
 */
function isFree(row: LeasesTable, now: number): boolean {
  if (row.released) return true;
  const holder = { host: row.host, pid: row.pid, pidStart: row.pid_start };
  if (row.renewed_at + row.timeout_ms < now) return !isLocalHolderRunning(holder);
  return isLocalHolderDead(holder);
}

export function renewLease(s: Statements, lease: Lease): Lease {
  const now = Date.now();
  const { changes } = leaseTransaction(s, () =>
    s.renewLease.run(now, lease.timeoutMs, lease.rootId, lease.holderId, lease.epoch),
  );
  if (changes === 0) throw new LeaseLostError(lease.rootId, lease.epoch);
  return { ...lease, renewedAt: now };
}

/** A lease that was already lost is not ours to release: nothing to do. */
export function releaseLease(s: Statements, lease: Lease): void {
  leaseTransaction(s, () => s.releaseLease.run(lease.rootId, lease.holderId, lease.epoch));
}

/** A lease write without an fsync of its own (see the file note); the writes after it get the journal's durability again. */
function leaseTransaction<T>(s: Statements, fn: () => T): T {
  s.setSyncFor(false);
  try {
    return writeTransaction(s, fn);
  } finally {
    s.setSyncFor(true);
  }
}

/** The current lease, or undefined when nobody holds it (never taken, or released). */
export function getLease(s: Statements, rootId: RunId): Lease | undefined {
  const row = s.selectLease.get(rootId);
  return row && !row.released ? leaseFromRow(row) : undefined;
}
