/**
 * Which runs the service should drive now, read from the journal alone.
 *
 * A root run is due when nobody drives it and it can go on by itself:
 * - crashed: stored running (or awaiting input) and its lease expired, its
 *   holder is gone, or it has none (a run left by `run --detach` or
 *   `resume --detach` has released its lease);
 * - answered: parked on `ctx.ask` (awaiting input, nobody drives it) and a
 *   question of it was answered after the run last changed, or its deadline
 *   passed, or no question is open any more;
 * - stopped by the service: interrupted while a drive the service started
 *   ran it (the service was stopped, or that drive lost its lease in time):
 *   it goes on when a service runs again.
 * A run sleeping in `ctx.sleep` (its last step is a sleep whose wake-up time
 * is ahead) is due shortly before it wakes, not now: no process waits for
 * hours in between.
 *
 * Never due: a workflow that opted out (`recover: false`, recorded when the
 * run started), a run the service already left for a person (its error is
 * `recovery_stopped`, until someone resumes it), and every run stopped by a
 * person (interrupted by Ctrl-C, failed, blocked, cancelled, completed).
 *
 * What the events say (the opt-out, the last drive's origin, the sleep, the
 * place, the service's crashed drives in a row) is read once per change of
 * the run (its last seq), not per scan.
 */

import { shownStatus } from "../journal/run-status.ts";
import type { Journal } from "../journal/journal.ts";
import type { JournalEvent, Lease, RunRecord } from "../journal/runs.ts";
import { EVENT } from "../engine/journal-events.ts";
import { recordedPlace, type RunPlace } from "../engine/run-place.ts";
import type { RunId } from "../shared/ids.ts";

export const RECOVERY_STOPPED = "recovery_stopped";
/** A sleeping run's drive starts this long before its wake-up time (the process start and replay fit in it). */
export const WAKE_AHEAD_MS = 1_000;

export type DueReason = "crashed" | "answered" | "service_stopped";

export type Verdict =
  | { due: false; why?: "opted_out" | "left_for_a_person" }
  | { due: true; reason: DueReason; at: number; place: RunPlace; digest: string; crashesInARow: number };

interface Facts {
  lastSeq: number;
  recover: boolean;
  lastDriveByService: boolean;
  /** The wake-up time of a sleep that is the run's last step (and on the journal's clock, if recorded). */
  sleepUntil: { wakeAt: number; journalWakeAt?: number } | undefined;
  place: RunPlace;
  /** How many drives of the service in a row ended without recording how (crashes), as the journal shows them. */
  crashesInARow: number;
  /** Replay positions of the root run's recorded steps (an answered question among them needs no wake-up). */
  checkpointed: ReadonlySet<string>;
}

const NONE: ReadonlySet<string> = new Set();

/** The stored statuses a due run can have. */
export const CANDIDATE_STATUSES = ["running", "awaiting_input", "interrupted"] as const;

export class DueRuns {
  private readonly facts = new Map<RunId, Facts>();

  constructor(private readonly journal: Journal) {}

  /** Forget runs that are no longer candidates (the cache holds only what a scan may ask again). */
  retain(ids: ReadonlySet<RunId>): void {
    for (const id of this.facts.keys()) if (!ids.has(id)) this.facts.delete(id);
  }

  /**
   * `journalNow`: the journal's clock read at `now` where it has one (Postgres): a sleep that recorded its
   * wake-up on it (engine/steps/sleep.ts) is due by that clock, whatever this host's says.
   */
  async verdict(run: RunRecord, now = Date.now(), journalNow?: number, leaseRead?: { lease: Lease | undefined }): Promise<Verdict> {
    let reason: DueReason | undefined;
    const leaseOf = async () => (leaseRead ? leaseRead.lease : await this.journal.getLease(run.id));
    if (run.status === "running") {
      const lease = await leaseOf();
      if (shownStatus(run, lease, now) === "crashed") reason = "crashed";
    } else if (run.status === "awaiting_input") {
      const lease = await leaseOf();
      const nobody = !lease || shownStatus(run, lease, now) === "crashed";
      if (nobody && (await this.answered(run, now, (await this.factsOf(run)).checkpointed))) reason = "answered";
    } else if (run.status === "interrupted") {
      reason = "service_stopped"; // confirmed from the events below
    }
    if (!reason) return { due: false };
    if (run.error?.code === RECOVERY_STOPPED) return { due: false, why: "left_for_a_person" };
    const facts = await this.factsOf(run);
    if (!facts.recover) return { due: false, why: "opted_out" };
    if (reason === "service_stopped" && !facts.lastDriveByService) return { due: false };
    const sleep = facts.sleepUntil;
    const until = sleep?.journalWakeAt !== undefined && journalNow !== undefined ? now + (sleep.journalWakeAt - journalNow) : sleep?.wakeAt;
    const at = until !== undefined && reason !== "answered" ? Math.max(now, until - WAKE_AHEAD_MS) : now;
    return { due: true, reason, at, place: facts.place, digest: run.workflowDigest, crashesInARow: facts.crashesInARow };
  }

  /**
   * The verdict again on the run as it is now, for a run a scan found due on the record it listed: that
   * record may be older than the lease the verdict read (a drive that ended since recorded its end, then
   * released its lease, and the run looks abandoned; a service that left the run for a person since). The
   * lease is read first, then the run: a drive records its end before it releases its lease, so a lease
   * found released or dead here comes with the run's end, if it ended, in the record read after it.
   */
  async confirm(runId: RunId, now = Date.now(), journalNow?: number): Promise<{ run: RunRecord; verdict: Verdict } | undefined> {
    const lease = await this.journal.getLease(runId);
    const run = await this.journal.getRun(runId);
    if (!run) return undefined;
    return { run, verdict: await this.verdict(run, now, journalNow, { lease }) };
  }

  /**
   * An answer the run has not recorded yet (a question of the root whose step has no checkpoint; of a child
   * run: answered since the run last changed), a question past its deadline, or none open any more.
   */
  private async answered(run: RunRecord, now: number, checkpointed: ReadonlySet<string>): Promise<boolean> {
    const prompts = await this.journal.messages.prompts(run.id);
    const open = prompts.filter((p) => p.state === "open");
    if (open.length === 0) return true;
    if (open.some((p) => p.deadline !== null && p.deadline <= now)) return true;
    return prompts.some(
      (p) => p.state === "answered" && (p.runId === run.id ? !checkpointed.has(p.stageKey) : (p.answeredAt ?? 0) >= run.updatedAt),
    );
  }

  private async factsOf(run: RunRecord): Promise<Facts> {
    const known = this.facts.get(run.id);
    if (known && known.lastSeq === run.lastSeq) return known;
    const events = await this.journal.readEvents(run.id);
    const facts: Facts = {
      lastSeq: run.lastSeq,
      recover: (events[0]?.payload as { recover?: unknown } | undefined)?.recover !== false,
      lastDriveByService: lastDriveByService(events),
      sleepUntil: sleepingUntil(events),
      place: recordedPlace(run, events),
      crashesInARow: serviceCrashes(events),
      // Only a run waiting for an answer needs them (kept per run between scans: not for every run).
      checkpointed: run.status === "awaiting_input" ? new Set(events.filter((e) => e.type === EVENT.checkpoint && e.key !== null).map((e) => e.key!)) : NONE,
    };
    this.facts.set(run.id, facts);
    return facts;
  }
}

function lastDriveByService(events: readonly JournalEvent[]): boolean {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!;
    if (e.type === EVENT.runResumed) return (e.payload as { drivenBy?: unknown }).drivenBy === "service";
    if (e.type === EVENT.runStarted) return false;
  }
  return false;
}

/**
 * Drives of the service that crashed, in a row up to now: each drive begins with run_started or
 * run_resumed and records how it ended with status_changed; one of the service's (drivenBy) that
 * recorded no end crashed. A drive that ended resets the count; a person's drive that crashed leaves it.
 */
function serviceCrashes(events: readonly JournalEvent[]): number {
  let streak = 0;
  let drive: { service: boolean; ended: boolean } | undefined;
  const close = () => {
    if (drive?.ended) streak = 0;
    else if (drive?.service) streak++;
  };
  for (const e of events) {
    if (e.type === EVENT.runStarted || e.type === EVENT.runResumed) {
      close();
      drive = { service: e.type === EVENT.runResumed && (e.payload as { drivenBy?: unknown }).drivenBy === "service", ended: false };
    } else if (e.type === EVENT.statusChanged && drive) {
      drive.ended = true;
    }
  }
  close();
  return streak;
}

/** Events that are not steps: looking back for the run's last step, they are passed over. */
const NOT_STEPS: ReadonlySet<string> = new Set([EVENT.statusChanged, EVENT.runResumed, EVENT.controlApplied, EVENT.recoveryStopped, EVENT.usageRecorded]);

function sleepingUntil(events: readonly JournalEvent[]): { wakeAt: number; journalWakeAt?: number } | undefined {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!;
    if (NOT_STEPS.has(e.type)) continue;
    const p = e.payload as { kind?: unknown; result?: { wakeAt?: unknown; journalWakeAt?: unknown } };
    if (e.type === EVENT.checkpoint && p.kind === "sleep" && typeof p.result?.wakeAt === "number") {
      const onJournal = p.result.journalWakeAt;
      return { wakeAt: p.result.wakeAt, ...(typeof onJournal === "number" ? { journalWakeAt: onJournal } : {}) };
    }
    return undefined;
  }
  return undefined;
}
