/**
 * The status a user sees. A run stored as "running" whose lease expired, or
 * whose holder process on this host is gone, is shown as "crashed": nobody
 * drives it, and `atomic resume` can take it over at once. A live run asked
 * to pause (control "pause") is shown as "paused": no new step starts. A
 * run waiting for an answer (ctx.ask) shows "awaiting_input" whether its
 * driver waits with it or stopped and parked it; "crashed" if the driver died.
 * A run that ended by continuing as a new run (ctx.continueAsNew) shows
 * "continued".
 *
 * Clocks: on Postgres a lease's expiry is judged by the database's clock,
 * which wrote its renewedAt and is read with it (Lease.readAt); on SQLite
 * it is the holder's wall clock (renewedAt) against ours, so a clock
 * stepped on either side would flip a live run to "crashed". A holder on
 * this host that is visibly the same process (pid and start time) and not
 * stopped is trusted over the clocks: it drives
 * the run (it fences itself by a monotonic deadline, engine/lease-keeper.ts).
 * For a holder on another host, or a stopped one (SIGSTOP: resume may take
 * it over once its lease expired), the expiry decides as before.
 */

import { isLocalHolderDead, isLocalHolderRunning } from "../shared/process-info.ts";
import { CONTINUED_CODE, type Lease, type RunRecord, type ShownStatus } from "./runs.ts";
import { runPausedBy } from "./run-control.ts";

export function shownStatus(run: RunRecord, lease: Lease | undefined, now = Date.now()): ShownStatus {
  // Awaiting input: parked (its driver stopped and gave the lease back) or driven and waiting; crashed if its driver died.
  if (run.status === "awaiting_input") {
    if (lease && (expired(lease, now) || isLocalHolderDead(lease))) return "crashed";
    return "awaiting_input";
  }
  if (run.status === "completed" && run.error?.code === CONTINUED_CODE) return "continued";
  if (run.status !== "running") return run.status;
  if (!lease) return "crashed";
  if (isLocalHolderDead(lease) || expired(lease, now)) return "crashed";
  return runPausedBy(run.control) ? "paused" : "running";
}

/**
 * Whether a lease still has a driver: held (the journal returns released
 * leases as none), not past its expiry, its holder not a gone process of
 * this host. A run whose lease is live is never taken from under its driver.
 */
export function leaseLive(lease: Lease | undefined, now = Date.now()): boolean {
  return lease !== undefined && !isLocalHolderDead(lease) && !expired(lease, now);
}

/**
 * Past its expiry, unless its holder visibly still runs here: by the journal's clock where it has one
 * (Postgres: the database's, which also wrote renewedAt), else by this host's.
 */
function expired(lease: Lease, now: number): boolean {
  return lease.renewedAt + lease.timeoutMs < (lease.readAt ?? now) && !isLocalHolderRunning(lease);
}

/** When the lease of a crashed run expired (or would have), for display. */
export function leaseExpiry(lease: Lease | undefined): number | undefined {
  return lease ? lease.renewedAt + lease.timeoutMs : undefined;
}

/**
 * Where a run's duration stops: its end once it ended; for a crashed run the
 * last sign of its driver (its last event or lease renewal), not now; for a
 * live run (running, paused, awaiting an answer, parked or driven) now.
 */
export function shownEnd(run: RunRecord, status: ShownStatus, lease: Pick<Lease, "renewedAt"> | undefined, now = Date.now()): number {
  if (run.endedAt !== null && run.endedAt !== undefined) return run.endedAt;
  if (status === "crashed") return Math.min(now, Math.max(run.updatedAt, lease?.renewedAt ?? 0));
  if (status === "running" || status === "paused" || status === "awaiting_input") return now;
  return run.updatedAt;
}

/**
 * Why a crashed run is crashed, one answer for as long as it stays crashed:
 * its driver was a process of this host that is gone (whether or not its
 * lease ran out since), or its lease expired (a driver elsewhere, or none).
 */
export function crashCause(lease: Lease | undefined): "driver_gone" | "lease_expired" {
  return lease && isLocalHolderDead(lease) ? "driver_gone" : "lease_expired";
}
