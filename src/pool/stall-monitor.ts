/**
 * Measures this process's own event-loop stalls (a long synchronous SQLite
 * transaction, GC, a descheduled or SIGSTOPped process) on the timer of the
 * periodic check that needs them, not on a tick of its own. The
 * coordinator's lease sweep (every 500 ms) and the root's reconcile (every
 * work lease) run as this monitor's `check`; the coordinator adds the stall
 * time since a worker's last heartbeat to that worker's lease, the root the
 * stall time since it asked the coordinator about a stage to the time the
 * answer may take, so this process's own stalls are never charged to its
 * peer.
 *
 * Why the check's own timer is enough: a stall hurts only a check that runs
 * before the messages that arrived during it are read. After a stall the
 * loop runs due timers before it reads its sockets, so a stall that
 * overlaps the check's due time makes that check fire late by the part of
 * the stall past its due time, and with it in hand that check credits the
 * peer with it. A stall that ends before the check is due is over before the
 * check runs: the messages it held back are read first. The part of a
 * stall before the due time is not counted; it is at most one period, and
 * the peer's answer it held back is read before the check runs. A reading
 * of `stalledMs` between two checks (a heartbeat's renewal, a control
 * wait's timeout) adds the lateness of a check that is due but has not run
 * yet; the check then adds only what came after that.
 *
 * The monitor wakes its process once per check period and at no other
 * time (a 100 ms tick of its own was 10 wake-ups a second in the root and
 * in the coordinator, about 2.5 ms of CPU a second each: bench/README.md).
 */

export class StallMonitor {
  private totalMs = 0;
  /** When the next check is due (monotonic), and how much of its lateness is already counted. */
  private due: number;
  private counted = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private check: () => void = () => {};
  private stopped = false;
  private keepAlive = false;

  constructor(
    private readonly periodMs: number,
    private readonly thresholdMs = 50,
  ) {
    this.due = performance.now() + periodMs;
    this.arm();
  }

  /** Runs `check` every period (after the stall it met is counted); `keepAlive`: the timer keeps the process alive, as the check's own would. */
  runs(check: () => void, keepAlive = false): void {
    this.check = check;
    this.keepAlive = keepAlive;
    if (keepAlive) this.timer?.ref();
  }

  /** Total stalled milliseconds so far (monotonic). */
  get stalledMs(): number {
    this.observe(performance.now());
    return this.totalMs;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** A chain of timeouts, each due a period after the last one ran: a late one's lateness is exactly the stall it met. */
  private arm(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      const now = performance.now();
      this.observe(now);
      this.due = now + this.periodMs;
      this.counted = 0;
      this.arm();
      this.check();
    }, this.periodMs);
    if (!this.keepAlive) this.timer.unref();
  }

  private observe(now: number): void {
    const late = now - this.due;
    if (late <= this.thresholdMs || late <= this.counted) return;
    this.totalMs += late - this.counted;
    this.counted = late;
  }
}
