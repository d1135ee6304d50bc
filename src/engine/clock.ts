/**
 * The time durable timers read: `ctx.sleep` checkpoints its wake-up time
 * from `now()` and waits with `delay()`. The wall clock by default; the
 * test kit (src/testing/) gives a run a virtual one, on which a sleep of
 * 30 days is over at once and its recorded wake-up time is still 30 days
 * after its start.
 */

import { abortableDelay } from "./steps/delay.ts";

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms` of this clock's time; rejects with the signal's reason when it aborts. */
  delay(ms: number, signal: AbortSignal): Promise<void>;
}

export const WALL_CLOCK: Clock = { now: () => Date.now(), delay: abortableDelay };
