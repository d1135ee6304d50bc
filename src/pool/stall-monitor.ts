/**
 * Measures this process's own event-loop stalls: a timer that should fire
 * every `tickMs` and fires late by more than `thresholdMs` means the loop
 * was blocked (a long synchronous SQLite transaction, GC, a descheduled
 * process). The coordinator adds the stall time that passed since a
 * worker's last heartbeat to that worker's lease, so its own stalls are
 * never charged against workers.
 */

export class StallMonitor {
  private totalMs = 0;
  private last = performance.now();
  private readonly timer: ReturnType<typeof setInterval>;

  constructor(
    private readonly tickMs = 100,
    private readonly thresholdMs = 50,
  ) {
    this.timer = setInterval(() => this.tick(), tickMs);
    this.timer.unref();
  }

  /** Total stalled milliseconds so far (monotonic). */
  get stalledMs(): number {
    this.tick();
    return this.totalMs;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private tick(): void {
    const now = performance.now();
    const late = now - this.last - this.tickMs;
    if (late > this.thresholdMs) this.totalMs += late;
    this.last = now;
  }
}
