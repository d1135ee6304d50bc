/**
 * Keeps a driver's lease on its run, and stops the driver when it cannot.
 *
 * Appends are fenced in the journal, but a tool function or a stage start
 * is not an append: a driver that was stalled (SIGSTOP, swapped out, cut off
 * from its database) past its lease's expiry learns that another process
 * took the run over only at its next write, and until then it would go on
 * calling tools and starting stages beside the new holder. So the driver
 * keeps a local deadline on the monotonic clock (performance.now(), which
 * also runs while the process is stopped): the moment its last successful
 * renewal began, plus the lease timeout, minus a margin (a fifth of the
 * timeout). The journal's expiry is later than that (it counts from the
 * renewal's commit), so the driver always stops itself before another
 * process may take the lease.
 *
 * States: held --renewed--> held (deadline moves on)
 *         held --deadline passed, or a renewal found the lease taken--> lost (final)
 *
 * `held()` is asked synchronously before every step starts, every tool
 * function call and every stage execution: past the deadline it answers
 * false and reports the loss (once), whatever the timers have done, so the
 * first thing a process does after it wakes from a stall is stop. A renewal
 * that fails on a busy database is retried at the next tick; only the
 * deadline decides. One that fails because the journal cannot take writes
 * (a full disk, a read-only home: writeStopped in storage-errors.ts) is
 * passed to `onStorageFault` at once, which stops the run resumably
 * rather than let it wait out its lease.
 */

import type { Journal } from "../journal/journal.ts";
import type { Lease } from "../journal/runs.ts";
import { LeaseLostError } from "../shared/errors.ts";

export type LeaseLoss = "deadline" | "taken";

export class LeaseKeeper {
  private deadline: number;
  private lost: LeaseLoss | undefined;
  private renewing = false;
  private renewTimer: ReturnType<typeof setInterval> | undefined;
  private deadlineTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly journal: Journal,
    private readonly lease: Lease,
    /** When the acquisition that gave us the lease began (performance.now()). */
    acquiredAt: number,
    private readonly onLost: (why: LeaseLoss) => void,
    /** A renewal met a journal that takes no writes; true when that stopped the run. */
    private readonly onStorageFault: (err: unknown) => boolean = () => false,
  ) {
    this.deadline = this.deadlineAfter(acquiredAt);
  }

  /** How far before the journal's expiry the driver stops itself. */
  get marginMs(): number {
    return Math.floor(this.lease.timeoutMs / 5);
  }

  start(): void {
    this.renewTimer = setInterval(() => void this.renew(), Math.max(100, Math.floor(this.lease.timeoutMs / 3)));
    this.armDeadline();
  }

  stop(): void {
    clearInterval(this.renewTimer);
    clearTimeout(this.deadlineTimer);
  }

  /** True while the lease is surely still ours; false (and the loss reported) once it may not be. */
  held(): boolean {
    if (this.lost) return false;
    if (performance.now() < this.deadline) return true;
    this.lose("deadline");
    return false;
  }

  get loss(): LeaseLoss | undefined {
    return this.lost;
  }

  private async renew(): Promise<void> {
    if (this.renewing || !this.held()) return;
    this.renewing = true;
    const startedAt = performance.now();
    try {
      await this.journal.renewLease(this.lease);
      // A renewal that took longer than what was left counts for nothing: the deadline passed meanwhile.
      if (this.held()) {
        this.deadline = this.deadlineAfter(startedAt);
        this.armDeadline();
      }
    } catch (err) {
      if (err instanceof LeaseLostError) this.lose("taken");
      else if (this.onStorageFault(err)) this.stop();
      // Anything else: tried again at the next tick, until the deadline says otherwise.
    } finally {
      this.renewing = false;
    }
  }

  private deadlineAfter(start: number): number {
    return start + this.lease.timeoutMs - this.marginMs;
  }

  /** A timer at the deadline, so a driver whose renewals keep failing stops even when it starts nothing. */
  private armDeadline(): void {
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = setTimeout(() => this.held(), Math.max(0, this.deadline - performance.now()) + 1);
    this.deadlineTimer.unref?.();
  }

  private lose(why: LeaseLoss): void {
    if (this.lost) return;
    this.lost = why;
    this.stop();
    this.onLost(why);
  }
}
