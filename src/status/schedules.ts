/**
 * The schedules as the page and `GET /api/schedules` show them (read-only:
 * `atomic schedule …` changes them): each with its next tick from its cron
 * expression, and its last run's status as the run list shows it.
 */

import type { Journal } from "../journal/journal.ts";
import { shownStatus } from "../journal/run-status.ts";
import { parseCron } from "../shared/cron.ts";
import type { RunId } from "../shared/ids.ts";

export interface ScheduleView {
  name: string;
  cron: string;
  timezone: string | null;
  workflow: string;
  inputs: Record<string, unknown>;
  cwd: string;
  overlap: string;
  catchUp: string;
  paused: boolean;
  createdAt: number;
  /** The next tick (ms); null when paused or the expression has none left. */
  nextTickAt: number | null;
  lastTickAt: number | null;
  lastRunId: string | null;
  lastRunStatus: string | null;
  bufferedTickAt: number | null;
}

export async function scheduleViews(journal: Journal, now: number): Promise<ScheduleView[]> {
  const out: ScheduleView[] = [];
  for (const s of await journal.schedules.list()) {
    const run = s.lastRunId ? await journal.getRun(s.lastRunId as RunId) : undefined;
    const lastRunStatus = run ? shownStatus(run, await journal.getLease(run.rootId), now) : null;
    let nextTickAt: number | null = null;
    if (!s.paused) {
      try {
        nextTickAt = parseCron(s.cron, s.timezone).next(Math.max(now, s.lastTickAt ?? 0)) ?? null;
      } catch {
        nextTickAt = null; // a time zone this machine no longer knows: shown without a next tick
      }
    }
    const { updatedAt: _updated, ...rest } = s;
    out.push({ ...rest, nextTickAt, lastRunStatus });
  }
  return out;
}
