/**
 * The origin filter of run listings (ListRunsFilter.origin), shared by the
 * backends: which runs each origin selects, read from what the run's
 * `run_started` (its first event, seq 1) and its `run_resumed` events say.
 *
 * - `rerun`, `fork`: the run_started names the run it came from
 *   (`origin.kind`, `atomic rerun`/`fork` or the page's Rerun/Fork).
 * - `schedule`, `api`, `cli`: the run_started says how a new run was started
 *   (`startedBy`: a schedule's tick, `POST /api/runs` or the page, the
 *   `atomic run` command) and names no run it came from.
 * - `recovery`: the service recovered the run at least once: a drive of the
 *   service (`run_resumed` with `drivenBy: "service"`) that continued what
 *   another drive had started, its previous event neither the run's start,
 *   another drive's start, nor a result a fork copied in (status/source.ts
 *   `recoveries` counts the same drives). Any run may also be a recovery.
 *
 * Runs recorded before `startedBy` was: a schedule's runs are known by their
 * id (`sched-…`, service/scheduler.ts) and match `schedule`; the others
 * match neither `api` nor `cli` (nothing recorded tells them apart), and
 * still match `rerun`, `fork` and `recovery`. A run a continueAsNew started
 * records no `startedBy` either.
 *
 * The journal stores both on the run's row when it records those events
 * (RunRecord.origin, .recovered): ./run-origin-sql.ts.
 */

/** The origins a run list can be filtered by, in the order help and errors list them. */
export const RUN_ORIGINS = ["schedule", "api", "cli", "rerun", "fork", "recovery"] as const;
export type RunOriginFilter = (typeof RUN_ORIGINS)[number];
/** The origins that say how a run was started (all but `recovery`, which any run may also be). */
export type StartOrigin = Exclude<RunOriginFilter, "recovery">;

/** How a new run was started, recorded as `startedBy` in its run_started. */
export type StartedBy = "cli" | "api" | "schedule";

export function isRunOrigin(text: string): text is RunOriginFilter {
  return (RUN_ORIGINS as readonly string[]).includes(text);
}

/** The sentence refusing an unknown origin. */
export function badOriginMessage(text: string): string {
  return `origin must be one of ${RUN_ORIGINS.join(", ")}, got ${JSON.stringify(text.slice(0, 80))}`;
}

/** The id prefix of the runs a schedule starts (service/scheduler.ts tickRunId). */
export const SCHEDULED_ID_PREFIX = "sched-";

