/**
 * The scheduler: the decisions of the service's schedules duty
 * (schedule-duty.ts; `atomic serve --no-schedules` turns it off), which
 * starts the runs of the schedules in the journal (journal/schedules.ts)
 * at their cron ticks.
 *
 * Each pass (every second, or when a test calls `pass()`; time comes from
 * an injected clock, never from the wall directly) looks at every schedule
 * that is not paused:
 *
 * - Due ticks are those after its cursor (`lastTickAt`, or its creation)
 *   up to now. Only the latest can start a run. It is on time if it is at
 *   most `graceMs` old; earlier ones, and a late latest one, were missed
 *   (no service ran then). Catch-up `skip`: a missed tick starts nothing;
 *   `run-once`: the latest due tick starts one run however late, for all
 *   the ticks missed before it.
 * - Overlap, when the schedule's last run still runs (running, paused or
 *   waiting for an answer; a crashed run nobody drives does not count):
 *   `skip` starts nothing, `buffer-one` keeps the tick (only the first one
 *   kept; later ones are skipped) and starts it once that run ended,
 *   `allow` starts it anyway.
 * - Every decision moves the cursor with one compare-and-set (advance):
 *   of two services (or a restarted one) exactly one wins a tick, and only
 *   the winner starts its run.
 * - The run's id is derived from the schedule and the tick time
 *   (`tickRunId`: `sched-<name>-<UTC time>`), and starts are keyed
 *   (engine/keyed-start.ts): starting one id twice makes one run. So a
 *   winner that died between claiming a tick and recording its run is
 *   repaired by any later pass: a claimed run that is still not recorded
 *   `REPAIR_MS` after the claim is started again, under the same id.
 */

import type { ScheduleRecord, ScheduleStore, TickAdvance } from "../journal/schedules.ts";
import { parseCron, type CronSchedule } from "../shared/cron.ts";
import { errorInfo } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";

export interface Clock {
  now(): number;
}

/** Where a schedule's last run is: still going, ended (or nobody drives it), or not recorded (yet). */
export type RunState = "live" | "ended" | "absent";

export type SchedulerEvent =
  | { type: "started"; schedule: string; tickAt: number; runId: string; buffered?: boolean; repaired?: boolean }
  | { type: "skipped"; schedule: string; tickAt: number; reason: "overlap" | "missed" }
  | { type: "buffered"; schedule: string; tickAt: number }
  | { type: "error"; schedule: string; message: string };

export interface SchedulerOptions {
  store: ScheduleStore;
  clock: Clock;
  /** Starts the run `runId` of the schedule (keyed: a second start of the same id is the same run). */
  start(schedule: ScheduleRecord, runId: RunId): Promise<void>;
  runState(runId: string): Promise<RunState>;
  onEvent?: (e: SchedulerEvent) => void;
  /** How late a tick may be seen and still count as on time (default 60 s). */
  graceMs?: number;
  /** Milliseconds between passes (default 1000). */
  intervalMs?: number;
}

const DEFAULT_GRACE_MS = 60_000;
const DEFAULT_INTERVAL_MS = 1000;
/** A claimed tick whose run is not recorded this long after the claim: its claimer died before starting it. */
export const REPAIR_MS = 15_000;

/** The id of the run a schedule starts for a tick: stable, so every service derives the same one. */
export function tickRunId(name: string, tickAt: number): RunId {
  const t = new Date(tickAt).toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "z").toLowerCase();
  return `sched-${name}-${t}` as RunId;
}

/** The id of a run `atomic schedule trigger` starts: the time it was asked for, to the millisecond. */
export function triggerRunId(name: string, at: number): RunId {
  const t = new Date(at).toISOString().replace(/[-:]/g, "").replace(/Z$/, "z").toLowerCase();
  return `sched-${name}-trigger-${t}` as RunId;
}

export class Scheduler {
  private readonly crons = new Map<string, CronSchedule>();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  /** Runs this scheduler repaired once: a start that keeps failing to record its run is not spawned again and again. */
  private readonly repaired = new Set<string>();
  /** The last failure said per schedule (pass: once, not every second). */
  private readonly failures = new Map<string, string>();
  private passCount = 0;

  constructor(private readonly opts: SchedulerOptions) {}

  /** Passes finished (GET /api/service): a tick due before a pass began was seen by it. */
  get passes(): number {
    return this.passCount;
  }

  /** Passes every `intervalMs` until stop(). */
  start(): void {
    this.stopped = false;
    const loop = () => {
      this.running = this.pass().finally(() => {
        this.running = undefined;
        this.passCount++;
        if (!this.stopped) this.timer = setTimeout(loop, this.opts.intervalMs ?? DEFAULT_INTERVAL_MS);
      });
    };
    loop();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** One look at every schedule. Never rejects: a failure is reported (once until it changes) and the next pass tries again. */
  async pass(): Promise<void> {
    let schedules: ScheduleRecord[];
    try {
      schedules = await this.opts.store.list();
    } catch (err) {
      this.report("*", err);
      return;
    }
    for (const s of schedules) {
      if (s.paused) continue;
      try {
        await this.visit(s);
        this.failures.delete(s.name);
      } catch (err) {
        this.report(s.name, err);
      }
    }
  }

  /** A failure of a schedule (or of reading them all: "*"), said once for as long as it stays the same. */
  private report(name: string, err: unknown): void {
    const message = errorInfo(err).message;
    if (this.failures.get(name) === message) return;
    this.failures.set(name, message);
    this.opts.onEvent?.({ type: "error", schedule: name, message });
  }

  private async visit(s: ScheduleRecord): Promise<void> {
    const now = this.opts.clock.now();
    const state = s.lastRunId ? await this.opts.runState(s.lastRunId) : "ended";
    if (state === "absent" && now - s.updatedAt >= REPAIR_MS && !this.repaired.has(s.lastRunId!)) {
      this.repaired.add(s.lastRunId!);
      // Claimed and never recorded: start the same id again (a start that did happen meanwhile makes no second run).
      await this.opts.start(s, s.lastRunId as RunId);
      this.opts.onEvent?.({ type: "started", schedule: s.name, tickAt: s.lastTickAt ?? now, runId: s.lastRunId!, repaired: true });
      return;
    }
    const busy = state !== "ended";
    if (s.bufferedTickAt !== null && !busy) {
      await this.claimAndStart(s, s.bufferedTickAt, { lastTickAt: s.lastTickAt ?? s.bufferedTickAt, bufferedTickAt: null }, true);
      return;
    }
    const cron = this.cron(s);
    const first = cron.next(s.lastTickAt ?? s.createdAt);
    if (first === undefined || first > now) return;
    const latest = cron.latest(now) ?? first;
    const onTime = now - latest <= (this.opts.graceMs ?? DEFAULT_GRACE_MS);
    if (!onTime && s.catchUp === "skip") {
      await this.skip(s, latest, "missed");
      return;
    }
    if (busy && s.overlap === "skip") {
      await this.skip(s, latest, "overlap");
      return;
    }
    if (busy && s.overlap === "buffer-one") {
      if (await this.advance(s, { lastTickAt: latest, bufferedTickAt: s.bufferedTickAt ?? latest })) {
        this.opts.onEvent?.(s.bufferedTickAt === null ? { type: "buffered", schedule: s.name, tickAt: latest } : { type: "skipped", schedule: s.name, tickAt: latest, reason: "overlap" });
      }
      return;
    }
    await this.claimAndStart(s, latest, { lastTickAt: latest }, false);
  }

  /** Wins the tick (compare-and-set), then starts its run; a lost race starts nothing. */
  private async claimAndStart(s: ScheduleRecord, tickAt: number, change: TickAdvance, buffered: boolean): Promise<void> {
    const runId = tickRunId(s.name, tickAt);
    if (!(await this.advance(s, { ...change, lastRunId: runId }))) return;
    await this.opts.start(s, runId);
    this.opts.onEvent?.({ type: "started", schedule: s.name, tickAt, runId, ...(buffered ? { buffered } : {}) });
  }

  private async skip(s: ScheduleRecord, tickAt: number, reason: "overlap" | "missed"): Promise<void> {
    if (await this.advance(s, { lastTickAt: tickAt })) this.opts.onEvent?.({ type: "skipped", schedule: s.name, tickAt, reason });
  }

  private advance(s: ScheduleRecord, change: TickAdvance): Promise<boolean> {
    return this.opts.store.advance(s.name, { lastTickAt: s.lastTickAt, bufferedTickAt: s.bufferedTickAt }, change, this.opts.clock.now());
  }

  private cron(s: ScheduleRecord): CronSchedule {
    const key = `${s.cron}\u0000${s.timezone ?? ""}`;
    let c = this.crons.get(key);
    if (!c) this.crons.set(key, (c = parseCron(s.cron, s.timezone)));
    return c;
  }
}

