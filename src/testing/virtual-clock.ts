/**
 * The test kit's clock (../engine/clock.ts): time runs as on the wall,
 * plus every delay asked of it, which returns at once. A `ctx.sleep` of 30
 * days records a wake-up time 30 days on and is over in a microtask; a
 * resumed run reads the same clock, so a sleep it replays is past.
 */

import type { Clock } from "../engine/clock.ts";

export class VirtualClock implements Clock {
  /** Virtual time added by delays (ms). */
  skipped = 0;
  private readonly realStart = performance.now();

  constructor(private readonly start: number) {}

  now(): number {
    return Math.round(this.start + this.skipped + (performance.now() - this.realStart));
  }

  /** Moves the time on to `t` (a question's deadline), if it is not past already. */
  advanceTo(t: number): void {
    this.skipped += Math.max(0, t - this.now());
  }

  async delay(ms: number, signal: AbortSignal): Promise<void> {
    if (signal.aborted) throw signal.reason;
    this.skipped += Math.max(0, ms);
  }
}
