/**
 * A worker's own view of its work lease: the local deadline past which it
 * stops itself (docs/design/journal.md), on the monotonic clock.
 *
 * The lease is renewed by the worker's heartbeats, which the coordinator
 * commits to the journal and answers with a receipt. The deadline is the
 * moment the last heartbeat that was answered "committed" was sent (or the
 * stage started), plus the lease, minus a fifth of it. A worker past its
 * deadline has lost its stage only if the coordinator could have renewed
 * the lease and did not: so it stops once the coordinator was heard from
 * after the deadline (it answers, a ping, a stale receipt) with no renewal
 * since. A coordinator that says nothing at all is stalled (the coordinator
 * is the only one that hands an item to another worker, and its own stalls
 * are never charged to its workers), or gone, which the worker learns from
 * its IPC channel closing.
 */

/** How far before the lease's end the worker stops itself. */
const MARGIN = 1 / 5;

export class WorkLeaseDeadline {
  private renewedAt = 0;
  private heardAt = 0;
  /** Heartbeats waiting for their receipt: operation id → when sent. */
  private readonly beats = new Map<string, number>();

  constructor(private readonly leaseMs: number) {}

  /** A stage starts: its item was leased just now. */
  started(): void {
    this.renewedAt = performance.now();
    this.beats.clear();
  }

  heartbeatSent(opId: string): void {
    this.beats.set(opId, performance.now());
  }

  /** Any message from the coordinator. */
  heard(): void {
    this.heardAt = performance.now();
  }

  /** A receipt: true when it answered a heartbeat (a committed one renews the lease from when it was sent). */
  receipt(opId: string, status: string): boolean {
    const sentAt = this.beats.get(opId);
    if (sentAt === undefined) return false;
    this.beats.delete(opId);
    if (status === "committed") this.renewedAt = Math.max(this.renewedAt, sentAt);
    return true;
  }

  /** The lease may be gone: past the deadline, and the coordinator spoke since without renewing it. */
  passed(): boolean {
    const deadline = this.renewedAt + this.leaseMs * (1 - MARGIN);
    return performance.now() > deadline && this.heardAt > deadline;
  }
}
