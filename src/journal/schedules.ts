/**
 * The schedule store: the contract every journal backend implements for
 * `atomic schedule …` and the service's scheduler (src/service/scheduler.ts),
 * in the same database as the runs.
 *
 * A schedule is a cron expression in a time zone and a start request (a
 * workflow and its inputs, the directory its runs run in). Its tick cursor,
 * `lastTickAt`, is the time of the last tick the scheduler dealt with
 * (started, skipped or buffered). Two services on one journal race for a
 * tick through `advance`, a compare-and-set on that cursor: exactly one
 * wins the tick and starts its run. The run's id is derived from the
 * schedule and the tick time (tickRunId in the scheduler), and a start with
 * an existing id attaches instead of starting (engine/keyed-start.ts), so
 * even a service that claimed a tick and died before its run was recorded
 * is repaired by starting that same id again, never a second run.
 */

export const OVERLAP_POLICIES = ["skip", "buffer-one", "allow"] as const;
/** A tick while the schedule's previous run still runs: skip it, keep (only) one for when it ends, or start it anyway. */
export type OverlapPolicy = (typeof OVERLAP_POLICIES)[number];

export const CATCH_UP_POLICIES = ["skip", "run-once"] as const;
/** Ticks missed while no service ran: skipped, or one run for the latest of them. */
export type CatchUpPolicy = (typeof CATCH_UP_POLICIES)[number];

export interface NewSchedule {
  name: string;
  cron: string;
  /** An IANA time zone; null: UTC. */
  timezone: string | null;
  /** What the run command takes: a file path (absolute), `builtin:NAME`. */
  workflow: string;
  inputs: Record<string, unknown>;
  /** The directory its runs run in. */
  cwd: string;
  overlap: OverlapPolicy;
  catchUp: CatchUpPolicy;
  createdAt: number;
}

export interface ScheduleRecord extends NewSchedule {
  paused: boolean;
  updatedAt: number;
  /** The last tick dealt with (ms); null before the first. Ticks after max(createdAt, this) are due. */
  lastTickAt: number | null;
  /** The run the schedule started last (a tick or a trigger); the overlap policies look at it. */
  lastRunId: string | null;
  /** A tick kept for when the last run ends (overlap buffer-one), or null. */
  bufferedTickAt: number | null;
}

/** What a compare-and-set compares. */
export type TickState = Pick<ScheduleRecord, "lastTickAt" | "bufferedTickAt">;

/** What a tick changes, all in one compare-and-set. */
export interface TickAdvance {
  lastTickAt: number;
  lastRunId?: string | null;
  bufferedTickAt?: number | null;
}

export interface ScheduleStore {
  /** Creates the schedule; false if one of that name exists (nothing changed). */
  add(schedule: NewSchedule): Promise<boolean>;
  get(name: string): Promise<ScheduleRecord | undefined>;
  /** Every schedule, by name. */
  list(): Promise<ScheduleRecord[]>;
  /** False if there is no such schedule. */
  setPaused(name: string, paused: boolean, at: number): Promise<boolean>;
  /** False if there is no such schedule. Its runs stay. */
  delete(name: string): Promise<boolean>;
  /**
   * Moves the tick cursor (and the buffered tick) from what `expected` says
   * they are to `change`, if nobody moved them first. True for the one
   * caller that won.
   */
  advance(name: string, expected: TickState, change: TickAdvance, at: number): Promise<boolean>;
  /** Records a run started outside the ticks (`schedule trigger`), leaving the cursor. */
  recordRun(name: string, runId: string, at: number): Promise<void>;
}
