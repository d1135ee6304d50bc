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
 * after the deadline (a ping, a stale receipt, any other message) with no
 * renewal since. A committed receipt is not counted as hearing from it: it
 * says the coordinator renewed, and one that answers an older heartbeat
 * comes from a coordinator catching up after a stall of its own (its
 * receipts for the newer heartbeats follow), which must not cost the
 * worker its stage. A coordinator that says nothing at all is stalled (the
 * coordinator is the only one that hands an item to another worker, and
 * its own stalls are never charged to its workers), or gone, which the
 * worker learns from its IPC channel closing. A coordinator that loses the
 * worker pings it first; one that cannot commit pings it once the lease is
 * past in its own view.
 */

/** How far before the lease's end the worker stops itself. */
const MARGIN = 1 / 5;

export class WorkLeaseDeadline {
  private renewedAt = 0;
  private heardAt = 0;
  /** Heartbeats waiting for their receipt: operation id → when sent. */
  private readonly beats = new Map<string, number>();

  /** `now`: the monotonic clock (a test passes its own). */
  constructor(
    private readonly leaseMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** A stage starts: its item was leased just now. */
  started(): void {
    this.renewedAt = this.now();
    this.beats.clear();
  }

  heartbeatSent(opId: string): void {
    this.beats.set(opId, this.now());
  }

  /** Any message from the coordinator but a receipt (receipts go to `receipt`). */
  heard(): void {
    this.heardAt = this.now();
  }

  /**
   * A receipt: true when it answered a heartbeat. A committed one renews the lease from when its heartbeat was
   * sent and is not counted as hearing from the coordinator; any other receipt is.
   */
  receipt(opId: string, status: string): boolean {
    const sentAt = this.beats.get(opId);
    if (sentAt !== undefined) this.beats.delete(opId);
    if (sentAt !== undefined && status === "committed") this.renewedAt = Math.max(this.renewedAt, sentAt);
    else this.heard();
    return sentAt !== undefined;
  }

  /** The lease may be gone: past the deadline, and the coordinator spoke since without renewing it. */
  passed(): boolean {
    const deadline = this.renewedAt + this.leaseMs * (1 - MARGIN);
    return this.now() > deadline && this.heardAt > deadline;
  }
}
