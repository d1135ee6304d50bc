/**
 * The recovery duty: resumes runs whose driver died, wakes runs whose
 * question was answered or whose sleep ends, and continues runs the service
 * itself stopped (due-runs.ts says which), one child process per run
 * (drives.ts).
 *
 * Every SCAN_MS the duty lists the candidate runs (an indexed read of the
 * runs nobody has finished) and starts a drive for each due one, oldest
 * first, up to `maxRuns` drives at once; the rest wait for a free slot.
 * A scan that finds none (and no drive of this service still running)
 * waits instead for another process's commit (journal/commit-watch.ts:
 * on the embedded journal; Postgres has no such watch and scans on), at
 * the latest IDLE_SCAN_MS: nothing can become due before some process
 * writes a run, so an idle service costs almost nothing, and a run that
 * starts is scanned as soon as it is recorded, then every SCAN_MS again.
 * Before it starts a drive it checks what the drive needs: the recorded
 * directory must exist, and the workflow file too for a run not pinned to
 * its code (engine/pinned-code.ts; else the run is left for a person with
 * that sentence: give-up.ts). A pinned run resumes its pinned code whatever
 * became of the file; an unpinned one whose file changed is noted and driven, and replay decides whether it still fits
 * the journal: a file that no longer does fails the drive with the step
 * that differs, and the service leaves the run crashed with that sentence.
 *
 * On a journal several hosts share, each host's service recovers its own
 * host's runs, and the runs of a host whose service is gone are adopted by
 * one other service (host-scope.ts); a run adopted that needs what only
 * its host has (its directory, an unpinned file) stays crashed for that
 * host, said once in the log, instead of being left for a person.
 *
 * A drive whose process dies without saying how its run ended is a crash
 * of that run's driver. Back-off per run after each: BACKOFF_MS[n-1]
 * before the next drive; after MAX_CRASHES crashes in a row (drives this
 * service started; a drive that ends any other way ends the streak) the run
 * is left for a person, with the exit and the log file in the sentence.
 * A restarted service takes the streak up from the journal (a drive of the
 * service that recorded no end crashed: due-runs.ts). A drive that stopped
 * because the journal was unreachable (storage_unavailable) is tried again
 * after the longest back-off, and never left for a person for it.
 *
 * A drive whose run has waited PARK_AFTER_MS for an answer to `ctx.ask` is
 * stopped (the run parks, resumable): a question nobody answers for a day
 * holds no process and no slot, and its answer wakes the run again. Only a
 * question the drive asked itself counts, timed on this host's clock from
 * the scan that first saw it: until the drive records its resume, the run
 * still reads awaiting input, as it was when it parked, however long ago
 * it asked (the drive that brings the answer must not be stopped for it).
 */

import { existsSync, statSync } from "node:fs";
import type { Journal } from "../journal/journal.ts";
import type { RunRecord } from "../journal/runs.ts";
import { BUILTIN_PREFIX } from "../engine/builtins.ts";
import { fileDigest } from "../engine/loader.ts";
import { pinnedManifest } from "../engine/pinned-code.ts";
import type { RunId } from "../shared/ids.ts";
import type { RunPlace } from "../engine/run-place.ts";
import { CANDIDATE_STATUSES, DueRuns, type DueReason } from "./due-runs.ts";
import { Drive, type DriveEnd } from "./drives.ts";
import { leaveForAPerson } from "./give-up.ts";
import { HostScope } from "./host-scope.ts";
import { hostLabel } from "../shared/process-info.ts";
import type { Duty, DutyStopReason, ServiceOptions } from "./service.ts";

export const DEFAULT_MAX_RUNS = 4;
const SCAN_MS = 500;
/** With no run to watch, the scan waits for another process's commit; at the latest it runs after this (waitForCommit). */
const IDLE_SCAN_MS = 30_000;
export const MAX_CRASHES = 3;
const BACKOFF_MS = [1_000, 5_000];
/** How long a drive may wait for an answer to a question before it is stopped and the run parked. */
export const PARK_AFTER_MS = 10_000;
/** Refusals that mean the drive was not needed (someone else drives the run, or it ended meanwhile), not a problem of the run. */
const HARMLESS_REFUSALS = new Set(["lease_held", "already_completed", "run_cancelled", "not_root"]);
/** A drive that stopped because the journal was unreachable: the run is tried again, never left for a person. */
const STORAGE_UNAVAILABLE = "storage_unavailable";

/** A run this service drove, for the page (which runs the service recovered) and `serve --json`. */
export interface RecoveredRun {
  runId: RunId;
  reason: DueReason;
  /** How many drives this service started for it. */
  drives: number;
  lastStartedAt: number;
  /** Set while a drive runs. */
  pid: number | undefined;
  crashesInARow: number;
  /** Why the service left it for a person, if it did. */
  leftBecause?: string;
}

export class RecoveryDuty implements Duty {
  readonly name = "recovery";
  private active = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Stops the wait for another process's commit (waitForCommit), while one is armed. */
  private unwatch: (() => void) | undefined;
  /** The commit mark the armed wait started from (describe: whether the last scan saw the journal as it is). */
  private waitMark: number | undefined;
  private scanning: Promise<void> | undefined;
  private readonly drives = new Map<RunId, Drive>();
  private readonly runs = new Map<RunId, RecoveredRun>();
  private readonly retryAt = new Map<RunId, number>();
  /** Drives being stopped because their run waits for an answer (parkIfWaiting). */
  private readonly parking = new Set<RunId>();
  /** Per drive: the run's last seq when it started, and the question it asked, as the scans saw it (parkIfWaiting). */
  private readonly waits = new Map<RunId, DriveWait>();
  private readonly due: DueRuns;
  /** Things said once per run and cause (opted out, sleeping until ...), so the log does not repeat every scan. */
  private readonly said = new Set<string>();
  /** Scans finished since the service started (GET /api/service): a run a scan passed over was looked at and left. */
  private scans = 0;
  /** Which runs are this service's to recover on a journal several hosts share (host-scope.ts). */
  private readonly scope: HostScope;

  constructor(private readonly service: ServiceOptions) {
    this.due = new DueRuns(service.journal);
    this.scope = new HostScope(service.journal);
  }

  private get journal(): Journal {
    return this.service.journal;
  }

  /** The runs this service drove since it started, newest first. */
  recovered(): RecoveredRun[] {
    return [...this.runs.values()].sort((a, b) => b.lastStartedAt - a.lastStartedAt);
  }

  drivesOf(runId: string): number | undefined {
    return this.runs.get(runId as RunId)?.drives;
  }

  describe(): unknown {
    // Waiting, and nothing committed by another process since the last scan's mark: that scan saw the journal as it is.
    const waiting = this.waitMark !== undefined && this.markCommits() === this.waitMark;
    return { maxRuns: this.service.maxRuns, driving: this.drives.size, scans: this.scans, waiting, adoptedHosts: this.scope.adoptedHosts(), runs: this.recovered() };
  }

  start(): void {
    this.active = true;
    this.schedule(0);
  }

  async stop(reason: DutyStopReason): Promise<void> {
    this.active = false;
    clearTimeout(this.timer);
    this.unwatch?.();
    this.unwatch = undefined;
    this.waitMark = undefined;
    await this.scanning;
    // The hosts this service recovered for are free for another service at once.
    await this.scope.releaseAll();
    // On standby the drives already started go on: their runs' leases fence them. At shutdown they end resumably.
    if (reason === "shutdown") await Promise.all([...this.drives.values()].map((d) => d.stop()));
  }

  private schedule(ms: number): void {
    if (!this.active) return;
    clearTimeout(this.timer);
    this.unwatch?.();
    this.unwatch = undefined;
    this.waitMark = undefined;
    this.timer = setTimeout(() => {
      // Taken before the scan reads: a commit made while it reads ends the wait below at once.
      const mark = this.markCommits();
      let idle = false;
      this.scanning = this.scan()
        .then((watching) => {
          idle = !watching && this.drives.size === 0;
        })
        .catch((err: unknown) => this.service.log({ type: "service_error", message: `recovery scan failed: ${String((err as Error)?.message ?? err)}; retrying` }))
        .finally(() => {
          this.scanning = undefined;
          this.scans++;
          if (idle && mark !== undefined) this.waitForCommit(mark);
          else this.schedule(SCAN_MS);
        });
    }, ms);
  }

  private markCommits(): number | undefined {
    try {
      return this.journal.commits?.mark();
    } catch {
      return undefined; // the scan meets the same failure and says so
    }
  }

  /**
   * No run to watch: nothing can become due until another process writes (a run starts, or a
   * crashed one is found only through its run's row, which some process wrote first). So the next
   * scan waits for the journal's next commit by another process (journal/commit-watch.ts), with
   * IDLE_SCAN_MS as a floor in case a watch misses one; where commits cannot be watched, the scan
   * runs every SCAN_MS as before.
   */
  private waitForCommit(mark: number): void {
    if (!this.active) return;
    const unwatch = this.journal.commits?.after(mark, () => this.schedule(0));
    if (!unwatch) return this.schedule(SCAN_MS);
    this.unwatch = unwatch;
    this.waitMark = mark;
    this.timer = setTimeout(() => this.schedule(0), IDLE_SCAN_MS);
  }

  /** Whether the scan found a run to keep an eye on (one nobody has finished): then scans go on every SCAN_MS. */
  private async scan(): Promise<boolean> {
    const candidates = await this.journal.listRuns({ statuses: CANDIDATE_STATUSES, limit: 10_000 });
    this.due.retain(new Set(candidates.map((r) => r.id)));
    this.scope.beginScan();
    const now = Date.now();
    // Sleeps recorded on the journal's clock wake by it (due-runs.ts), not by this host's.
    const journalNow = this.journal.clockNow ? await this.journal.clockNow() : undefined;
    // Oldest first: a run waiting longest gets the next free slot.
    for (const run of candidates.reverse()) {
      if (!this.active) return true;
      if (this.drives.size >= this.service.maxRuns && !this.drives.has(run.id)) continue;
      const driving = this.drives.get(run.id);
      if (driving) {
        this.parkIfWaiting(run, driving, now);
        continue;
      }
      if ((this.retryAt.get(run.id) ?? 0) > now) continue;
      const verdict = await this.due.verdict(run, now, journalNow);
      if (!verdict.due) {
        if (verdict.why === "opted_out") this.sayOnce(run.id, "opted_out", `run ${run.id} crashed; its workflow opted out of recovery (recover: false): resume it with atomic resume ${run.id}`);
        continue;
      }
      // A run of another host is its service's, or an adopter's (host-scope.ts).
      const scope = await this.scope.scopeOf(verdict.place.host);
      if (scope === "theirs") continue;
      if (verdict.at > now) {
        this.sayOnce(run.id, `sleep:${verdict.at}`, `run ${run.id} sleeps; the service resumes it at ${new Date(verdict.at).toISOString()}`);
        continue;
      }
      // Judged again on the run as it is now (due-runs.ts confirm): the listed record may predate a drive's end.
      const current = await this.due.confirm(run.id, now, journalNow);
      const sure = current?.verdict;
      if (!current || !sure?.due || sure.at > now) continue;
      if (!this.runs.has(run.id) && sure.crashesInARow >= MAX_CRASHES) {
        // Crashed that often under an earlier service (this one has not driven it yet): a person's now.
        await this.leave(run.id, `its driver crashed ${sure.crashesInARow} times in a row under the service`);
        continue;
      }
      await this.launch(current.run, sure.reason, sure.place, sure.digest, sure.crashesInARow, scope === "adopted");
    }
    return candidates.length > 0;
  }

  private async launch(run: RunRecord, reason: DueReason, place: RunPlace, digest: string, crashesSeen: number, adopted: boolean): Promise<void> {
    const { cwd: recordedCwd, path } = place;
    // A run pinned to its code (engine/pinned-code.ts) needs nothing of its file: the resume loads the pinned copy.
    const pinned = (await pinnedManifest(this.journal, digest)) !== undefined;
    const problem = placeProblem(recordedCwd, path, pinned);
    if (problem && adopted) {
      // What is missing here may be there: the run stays crashed for its own host's service (or a resume there).
      const host = hostLabel(place.host ?? "");
      this.sayOnce(run.id, `adopted:${problem}`, `run ${run.id} of host ${host} stays crashed: it cannot be recovered on this host, as ${problem} here; host ${host}'s service recovers it when it runs again, or resume it there`);
      return;
    }
    if (problem) {
      await this.leave(run.id, problem);
      return;
    }
    if (!pinned && !path.startsWith(BUILTIN_PREFIX) && currentDigest(path) !== digest) {
      this.sayOnce(run.id, `digest:${digest}`, `run ${run.id}: its workflow file ${path} changed since the run started; replay checks that the recorded steps still match`);
    }
    const drive = new Drive({ runId: run.id, cwd: recordedCwd ?? process.cwd(), home: this.service.home, journalUrl: this.service.journalUrl, durability: this.service.durability, args: this.service.driveArgs ?? [] });
    this.drives.set(run.id, drive);
    this.waits.set(run.id, { fromSeq: run.lastSeq });
    // A run this service has not driven yet starts from the crashes the journal shows (drives of an earlier service).
    const entry = this.runs.get(run.id) ?? { runId: run.id, reason, drives: 0, lastStartedAt: 0, pid: undefined, crashesInARow: crashesSeen };
    entry.reason = reason;
    entry.drives++;
    entry.lastStartedAt = Date.now();
    entry.pid = drive.pid;
    delete entry.leftBecause;
    this.runs.set(run.id, entry);
    const of = adopted ? ` of host ${hostLabel(place.host ?? "")}, whose service is gone,` : "";
    this.service.log({ type: "drive_started", runId: run.id, reason, pid: drive.pid, ...(adopted ? { host: place.host } : {}), message: `${WHY[reason]}: resuming run ${run.id}${of} (process ${drive.pid}, log ${drive.logPath})` });
    void drive.done.then((end) => this.ended(run.id, drive, end));
  }

  /**
   * A drive whose run has waited for an answer for PARK_AFTER_MS is stopped (SIGTERM: the run parks,
   * awaiting input, resumable), so a question nobody answers for hours holds no process and no slot;
   * the answer wakes the run again (due-runs.ts). The wait is one this drive recorded (the run changed
   * since it started), timed from the first scan that saw it: a run that still reads as it did when the
   * drive started is a drive not yet resumed (on a busy host that takes seconds), whatever its record's age.
   */
  private parkIfWaiting(run: RunRecord, drive: Drive, now: number): void {
    const wait = this.waits.get(run.id);
    if (!wait || this.parking.has(run.id)) return;
    if (run.status !== "awaiting_input" || run.lastSeq <= wait.fromSeq) {
      delete wait.asked;
      return;
    }
    wait.asked ??= now;
    if (now - wait.asked < PARK_AFTER_MS) return;
    this.parking.add(run.id);
    this.service.log({ type: "drive_parked", runId: run.id, message: `run ${run.id} waits for an answer; its drive stops until the answer comes` });
    void drive.stop().finally(() => this.parking.delete(run.id));
  }

  /**
   * A drive ended: how, said and acted on (back-off, left for a person). The drive stays in `drives` until
   * that is done, so a scan meanwhile does not see the run without a drive and start another one.
   */
  private async ended(runId: RunId, drive: Drive, end: DriveEnd): Promise<void> {
    try {
      await this.settle(runId, drive, end);
    } finally {
      this.drives.delete(runId);
      this.waits.delete(runId);
    }
    // A slot is free: the next due run need not wait for the next scan.
    if (this.active && !this.scanning) this.schedule(0);
  }

  private async settle(runId: RunId, drive: Drive, end: DriveEnd): Promise<void> {
    const entry = this.runs.get(runId)!;
    entry.pid = undefined;
    if (end.kind === "ended") {
      entry.crashesInARow = 0;
      this.retryAt.delete(runId);
      // A chain (ctx.continueAsNew) is driven as one: the drive's end is its last run's.
      const last = end.lastRunId;
      this.service.log({
        type: "drive_ended",
        runId,
        status: end.status,
        ...(last ? { lastRunId: last, message: `run ${runId} continued as new; its chain ended with run ${last} ${end.status}` } : { message: `run ${runId} ${end.status}` }),
      });
      if (end.status === "failed") await this.leaveIfDiverged(last ?? runId);
    } else if (end.kind === "refused" && end.errorCode === STORAGE_UNAVAILABLE) {
      // The journal went away under the drive (a Postgres outage): not the run's fault; tried again after a back-off.
      const wait = BACKOFF_MS.at(-1)!;
      this.retryAt.set(runId, Date.now() + wait);
      this.service.log({ type: "drive_stopped", runId, code: end.errorCode, message: `the drive of run ${runId} stopped: ${end.message}; trying again in ${wait / 1000} s` });
    } else if (end.kind === "refused") {
      entry.crashesInARow = 0;
      if (HARMLESS_REFUSALS.has(end.errorCode)) {
        this.service.log({ type: "drive_refused", runId, code: end.errorCode, message: `run ${runId} needs no drive from the service: ${end.message}` });
      } else {
        await this.leave(runId, end.message);
      }
    } else if (this.active) {
      // A drive SIGKILLed by the service's own shutdown is not the run's crash (inactive by then).
      entry.crashesInARow++;
      const how = end.signal ? `killed by ${end.signal}` : end.code === null ? "failed to start" : `exit code ${end.code}`;
      if (entry.crashesInARow >= MAX_CRASHES) {
        await this.leave(runId, `its driver crashed ${entry.crashesInARow} times in a row (last: ${how}; see ${drive.logPath})`);
      } else {
        const wait = BACKOFF_MS[entry.crashesInARow - 1] ?? BACKOFF_MS.at(-1)!;
        this.retryAt.set(runId, Date.now() + wait);
        this.service.log({ type: "drive_crashed", runId, crashes: entry.crashesInARow, message: `the driver of run ${runId} crashed (${how}); trying again in ${wait / 1000} s` });
      }
    }
  }

  /**
   * A drive that found the workflow file no longer replays the journal (the file was edited since) ended
   * the run failed; the run is not at fault, its file is: it is left crashed, with that sentence.
   */
  private async leaveIfDiverged(runId: RunId): Promise<void> {
    const run = await this.journal.getRun(runId).catch(() => undefined);
    if (run?.status !== "failed" || run.error?.code !== "nondeterminism") return;
    await this.leave(runId, `its workflow file no longer replays consistently (${run.error.message})`, true);
  }

  private async leave(runId: RunId, reason: string, crashed = false): Promise<void> {
    const written = await leaveForAPerson(this.journal, runId, reason, crashed).catch(() => false);
    if (!written) return;
    const entry = this.runs.get(runId);
    if (entry) entry.leftBecause = reason;
    this.retryAt.delete(runId);
    this.service.log({ type: "run_left", runId, reason, message: `run ${runId} is left for a person: ${reason}` });
  }

  private sayOnce(runId: RunId, what: string, message: string): void {
    const key = `${runId}:${what}`;
    if (this.said.has(key)) return;
    this.said.add(key);
    this.service.log({ type: "note", runId, message });
  }
}


/** What the scans saw of a drive's run: its last seq when the drive started; since when (this host's clock) a scan saw it wait for an answer after that. */
interface DriveWait {
  fromSeq: number;
  asked?: number;
}

const WHY: Record<DueReason, string> = {
  crashed: "nobody drives it (its driver is gone, or it was left to the service)",
  answered: "its question was answered",
  service_stopped: "the service stopped it",
};

/** Why a drive could not start in the run's recorded place, in one sentence; undefined when it can. */
function placeProblem(cwd: string | undefined, path: string, pinned: boolean): string | undefined {
  if (cwd !== undefined && !(existsSync(cwd) && statSync(cwd).isDirectory())) return `the directory it ran in, ${cwd}, no longer exists`;
  if (pinned || path.startsWith(BUILTIN_PREFIX)) return undefined;
  if (!existsSync(path)) return `its workflow file ${path} no longer exists`;
  if (currentDigest(path) === undefined) return `its workflow file ${path} cannot be read`;
  return undefined;
}

function currentDigest(path: string): string | undefined {
  try {
    return fileDigest(path);
  } catch {
    return undefined;
  }
}
