/**
 * Cron expressions in a time zone, through croner (a maintained library:
 * docs/design/conventions.md), which also decides what a tick means across daylight-saving
 * changes. What it does there (the tests in test/service/scheduler.test.ts
 * pin it down for Europe/Berlin):
 * - spring forward: a time that does not exist that day (02:30 when clocks
 *   jump from 02:00 to 03:00) fires once, at the first time after the gap
 *   (03:00 local);
 * - fall back: a time that exists twice (02:30 when clocks go from 03:00
 *   back to 02:00) fires once, at its first occurrence; a pattern that
 *   matches every hour fires in both copies of the repeated hour, as the
 *   hours really happen.
 * Five fields (minute precision) or six (seconds first).
 */

import { Cron } from "croner";
import { UsageError } from "./errors.ts";

/** A parsed schedule expression. Times are ms since the epoch. */
export interface CronSchedule {
  /** The first tick strictly after `after`, or undefined. */
  next(after: number): number | undefined;
  /** The last tick at or before `until`, or undefined. */
  latest(until: number): number | undefined;
}

export function parseCron(pattern: string, timezone: string | null): CronSchedule {
  if (timezone !== null) checkTimezone(timezone);
  let cron: Cron;
  try {
    // paused: croner keeps no timer of its own; the scheduler asks for ticks with its own clock.
    cron = new Cron(pattern, { paused: true, ...(timezone ? { timezone } : { timezone: "UTC" }) });
  } catch (err) {
    throw new UsageError("bad_cron", `--cron ${JSON.stringify(pattern)} is not a cron expression (${String((err as Error).message).replace(/^CronPattern: /, "")})`, {
      hint: 'five fields, minute hour day-of-month month day-of-week, like "0 9 * * 1-5" (a sixth field in front counts seconds)',
    });
  }
  return {
    next(after: number) {
      const d = cron.nextRun(new Date(after));
      return d ? d.getTime() : undefined;
    },
    latest(until: number) {
      // previousRuns counts ticks before the reference; a millisecond later takes in a tick at `until` itself.
      const d = cron.previousRuns(1, new Date(until + 1))[0];
      return d && d.getTime() <= until ? d.getTime() : undefined;
    },
  };
}

export function checkTimezone(timezone: string): void {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: timezone });
  } catch {
    throw new UsageError("bad_timezone", `--tz ${JSON.stringify(timezone)} is not a time zone this machine knows`, {
      hint: "use an IANA name like Europe/Berlin, America/New_York or UTC",
    });
  }
}
