/**
 * The root driver: starts or resumes a root run in this process.
 *
 * It takes the run's lease (a second driver of the same run gets
 * LeaseHeldError naming the holder), keeps it (lease-keeper.ts: renewals,
 * and a local deadline past which it stops itself: no step starts, no tool
 * is called, running stages are cancelled, and it ends "interrupted",
 * naming the process that drives the run now, if any), polls
 * the run's control row for requests from other processes (`atomic
 * cancel`), executes the workflow through a RunExecution, and gives the
 * lease up when the run has recorded how it ended.
 *
 * Nothing is written before the lease is held and the inputs are valid: a
 * bad request leaves the journal as it was.
 */

import type { Clock } from "./clock.ts";
import { collectCode, storedCode, type PinnedCode } from "./pinned-code.ts";
import { codeLoading, type LoadedCode } from "./code-loading.ts";
import { checkedInputs } from "./steps/continue-as-new.ts";
import { faultPoint } from "../shared/fault-points.ts";
import { recordEnvironment } from "./run-environment.ts";
import { isAbsolute, join } from "node:path";
import { GroupCommitWriter } from "../journal/group-commit.ts";
import type { AppendEntry } from "../journal/append.ts";
import type { Journal } from "../journal/journal.ts";
import { TERMINAL_STATUSES, type Lease, type RunRecord } from "../journal/runs.ts";
import { parseControl, pausedStages, runPausedBy } from "../journal/run-control.ts";
import type { StageIndexEntry } from "../journal/stage-index.ts";
import type { ForkSeed, RunOrigin } from "./fork.ts";
import type { StartedBy } from "../journal/run-origin.ts";
import { LeaseLostError, UsageError, errorInfo } from "../shared/errors.ts";
import { newRunId, type RunId } from "../shared/ids.ts";
import { thisProcessHolder } from "../shared/process-info.ts";
import { endRunProcesses } from "../shared/run-processes.ts";
import type { BudgetOptions, WorkflowDefinition } from "../sdk/types.ts";
import { defaultSlotsDir, loadConfig } from "../shared/config/load.ts";
import type { AtomicConfig } from "../shared/config/schema.ts";
import { openAdmissionSlots } from "../journal/open.ts";
import { Admission } from "./admission.ts";
import { limitsOf, mergeBudgets, recordedSpending, type Spent } from "./budget.ts";
import type { JournalEvent } from "../journal/runs.ts";
import { EVENT, type RunResumedPayload } from "./journal-events.ts";
import type { EngineObserver } from "./observer.ts";
import { ReplayCursor } from "./replay-cursor.ts";
import { RunExecution } from "./run-execution.ts";
import type { RunOutcome } from "./step-run.ts";
import { RunTree, type StopReason } from "./run-tree.ts";
import { InProcessExecutor, type StageExecutor } from "../runners/stage-executor.ts";
import { LeaseKeeper } from "./lease-keeper.ts";
import { loadTracer, type Tracer } from "./tracing/tracing.ts";
import { reviveInputs } from "./inputs.ts";

export const DEFAULT_LEASE_MS = 30_000;
const CONTROL_POLL_MS = 500;

export interface DriverOptions {
  journal: Journal;
  home: string;
  observer: EngineObserver;
  leaseTimeoutMs?: number;
  /** Where stages run: an executor, or a factory given the run's lease (the worker pool serves one drive). Default: in this process. */
  executor?: StageExecutor | ((lease: Lease, journal: Journal) => StageExecutor);
  /** Runners, models, prices, admission and default budget (default: loaded from `home` and the current directory). */
  config?: AtomicConfig;
  /** Who asked for this drive, recorded with a resume ("service": src/service/ recovers or wakes the run). */
  drivenBy?: "service";
  /** The time ctx.sleep reads and waits on (./clock.ts): the wall clock unless given (the test kit's virtual one). */
  clock?: Clock;
  /** `resume --upgrade`: the run moves from its pinned code to the current file (recorded with the resume). */
  upgraded?: boolean;
}

export interface NewRunRequest {
  definition: WorkflowDefinition;
  workflowPath: string;
  /** The code version (pinned-code.ts), or a builtin's digest. */
  digest: string;
  /** The code to pin the run to (loader.ts): stored before the run is recorded. */
  code?: PinnedCode;
  inputs: Record<string, unknown>;
  /** Budget flags (`--max-cost` ...): over the workflow's budget, over config's. */
  budget?: BudgetOptions;
  /** The new run's id, when the caller made it already; a fresh one otherwise. */
  runId?: RunId;
  /** The run this one reruns (`atomic rerun`), recorded in its `run_started`. */
  origin?: RunOrigin;
  /** How the run was started (journal/run-origin.ts), recorded in its `run_started`. */
  startedBy?: StartedBy;
  /** A fork's reused results (fork.ts): copied into the new run before it starts, replayed like a resume's. */
  seed?: ForkSeed;
  /** ctx.continueAsNew: the run this one continues (recorded in its `run_started`; driver.ts handOver). */
  continuedFrom?: RunId;
  /** ctx.continueAsNew: what the chain's runs before this one spent (recorded in its `run_started`): its budget counts it. */
  chainSpent?: Spent;
  /** Replay only (ReplayCursor.beyondHistory): called, and may throw, where the seed's history ends and a step would run live. */
  beyondHistory?: ReplayCursor["beyondHistory"];
}

/** A root run being driven by this process. */
export class RootRun {
  /** Every CONTROL_POLL_MS: whether the journal is still the file opened (run-tree.ts checkStorage), then the control row. */
  private controlTimer: ReturnType<typeof setInterval> | undefined;
  private applyingControl = false;
  /** The control passes, one after another (the poll's and those asked for over intercom). */
  private controlPasses: Promise<void> = Promise.resolve();
  /** Control revisions up to this one are applied (a resumed run starts from what its row says). */
  private appliedControlRev = 0;

  /** ctx.continueAsNew: the next run of the chain, started by this drive's hand-over (not yet driven: run() it). */
  successor: RootRun | undefined;
  /** The options this drive was made with, and its workflow file and budget: a hand-over starts the next run with them. */
  private given!: DriverOptions;
  private workflowPath = "";
  private digest = "";
  private budgetOptions: BudgetOptions | undefined;
  /** Whether this drive's ledger holds everything the chain spent up to this run's end (a resume loads it only under a cost or token cap). */
  private spentKnown = true;

  private constructor(
    readonly runId: RunId,
    private readonly tree: RunTree,
    private readonly execution: RunExecution,
    private readonly keeper: LeaseKeeper,
  ) {}

  /** Ask the run to stop: running stages end, the run records how it stopped. */
  stop(reason: StopReason): void {
    this.tree.stop(reason);
  }

  get stopReason(): StopReason | undefined {
    return this.tree.stopReason;
  }

  static async start(opts: DriverOptions, req: NewRunRequest): Promise<RootRun> {
    const runId = req.runId ?? newRunId();
    const acquiredAt = performance.now();
    const lease = await opts.journal.acquireLease(runId, thisProcessHolder(), { timeoutMs: leaseMs(opts) });
    const origin = req.seed?.origin ?? req.origin;
    const copies = (req.seed?.events ?? []).map((e) => seedEntry(runId, e, req.seed!));
    const cursor = new ReplayCursor(runId, copies.map((c, i) => ({ runId, seq: i + 2, type: c.type, key: c.key ?? null, idempotencyKey: null, payload: c.payload, at: c.at ?? 0 })));
    cursor.beyondHistory = req.beyondHistory;
    const root = RootRun.create(await traced(opts), lease, acquiredAt, req.definition, req.inputs, cursor, null);
    root.chainWith(opts, req.workflowPath, req.digest);
    const config = root.tree.config;
    const budget = mergeBudgets(config.budget, req.definition.budget, req.budget);
    root.setBudget(budget, req.chainSpent);
    try {
      // The run's code, stored before the run that names it (pinned-code.ts): resume finds it whatever became of the file.
      if (req.code) await opts.journal.code.put(req.code.files, Date.now());
      await root.tree.append({
        runId,
        type: EVENT.runStarted,
        // The working directory is the run's (run-place.ts): resume runs the rest there.
        payload: {
          workflow: req.definition.name,
          path: req.workflowPath,
          cwd: process.cwd(),
          digest: req.digest,
          depth: 0,
          // Where this drive runs (a run_resumed names its own): the machine of the root's own pool (run-report.ts ranOn).
          host: lease.host,
          ...(budget ? { budget } : {}),
          ...(origin ? { origin } : {}),
          ...(req.startedBy ? { startedBy: req.startedBy } : {}),
          ...(req.continuedFrom ? { continuedFrom: req.continuedFrom } : {}),
          ...(req.chainSpent && (req.chainSpent.costMicroUsd > 0 || req.chainSpent.tokens > 0) ? { chainSpent: req.chainSpent } : {}),
          // The service reads this, not the file (src/service/recovery.ts): a workflow that opted out stays out.
          ...(req.definition.recover === false ? { recover: false } : {}),
          // The environment the workflow sees, without secrets' values: resumes give it back (run-environment.ts).
          ...recordEnvironment(config),
        },
        newRun: {
          rootId: runId,
          parentId: null,
          parentKey: null,
          depth: 0,
          workflowName: req.definition.name,
          workflowPath: req.workflowPath,
          workflowDigest: req.digest,
          inputs: req.inputs,
        },
      });
    } catch (err) {
      // Refused (a run of this id exists: a keyed start that lost a race, engine/keyed-start.ts) or not recorded:
      // nobody drives a run here, so the lease goes back at once.
      await opts.journal.releaseLease(lease).catch(() => {});
      throw err;
    }
    // A fork's reused results, in one group commit, before any step of the new run can start.
    await Promise.all(copies.map((c) => root.tree.append(c)));
    return root;
  }

  /**
   * Resume a root run recorded in the journal. The caller has checked the
   * run is resumable and loaded its workflow file (nothing written so far).
   */
  static async resume(
    opts: DriverOptions,
    run: RunRecord,
    definition: WorkflowDefinition,
    digest: string,
    /** Budget flags of `atomic resume` (`--max-cost N` ...): over what the run recorded. */
    budgetOverride?: BudgetOptions,
    /**
     * The workflow file loaded (another one than recorded: `resume --workflow`), the directory it runs in, and
     * the code it loaded when that is not the code the run is pinned to (`--upgrade`): stored before the resume is.
     */
    place?: { path: string; cwd: string; code?: PinnedCode | undefined },
    /**
     * The run's events as the caller read them before the lease (`atomic resume` needs them to find the
     * workflow): only those appended since are read again. A journal is append-only, seqs gapless.
     */
    recorded?: readonly JournalEvent[],
  ): Promise<RootRun> {
    assertResumable(run);
    const holder = thisProcessHolder();
    const acquiredAt = performance.now();
    const lease = await opts.journal.acquireLease(run.id, holder, { timeoutMs: leaseMs(opts) });
    // The run as it is now that this process holds it: the caller's record was read before the lease, and a
    // cancel or pause can have come since (from a process that saw nobody drive the run, or saw the drive
    // before this one, such as a `resume --detach` leaving it to the service), or the run ended meanwhile.
    try {
      run = (await opts.journal.getRun(run.id)) ?? run;
      assertResumable(run);
    } catch (err) {
      await opts.journal.releaseLease(lease).catch(() => {});
      throw err;
    }
    const events = recorded ? [...recorded, ...(await opts.journal.readEvents(run.id, recorded.at(-1)?.seq ?? 0))] : await opts.journal.readEvents(run.id);
    // What an earlier drive left running on this host (an orphaned stage, a stale pool) ends before
    // anything starts again: a stage never runs beside an older copy of itself. Only a run that ever
    // started a stage (or a child run, whose stages are in its own events) can have left any.
    // Stage executions the previous driver queued are not anyone's any more: this run enqueues its own. A
    // work item is only appended with its stage's step_started, so the same runs are the only ones with any.
    if (events.some(startedProcesses)) {
      endRunProcesses(run.id);
      await opts.journal.work.abandon(lease);
    }
    // Inputs are stored as JSON: a v.date() input is a Date again, as it was on the first run.
    const inputs = reviveInputs(definition.inputs ?? {}, run.inputs as Record<string, unknown>);
    const tracedOpts = await traced(opts);
    // The drive before this one was lost (the run still reads running): the spans it left open end now.
    if (tracedOpts.tracer && (run.status === "running" || run.status === "awaiting_input")) tracedOpts.tracer.recover(run.id, run.workflowName, events);
    const root = RootRun.create(tracedOpts, lease, acquiredAt, definition, inputs, new ReplayCursor(run.id, events), run.status);
    root.chainWith(opts, place?.path ?? run.workflowPath, digest);
    // What was asked and not applied yet (of a drive that ended first, or while the run changed hands) is
    // applied by this drive's first control pass, a cancel too: the row keeps it (run_resumed clears nothing:
    // a request that came between the read above and that append would be erased unapplied).
    root.appliedControlRev = run.controlAck;
    // A run paused under an earlier drive stays paused from the start.
    if (runPausedBy(run.control)) root.tree.setPaused(true);
    // Stages paused under an earlier drive stay paused (the control values its drivers applied).
    for (const path of pausedStages(events.filter((e) => e.type === EVENT.controlApplied && e.runId === run.id).map((e) => String((e.payload as { action?: unknown }).action ?? "")))) root.pauseStage(path);
    const budget = mergeBudgets(recordedBudget(events) ?? mergeBudgets(root.tree.config.budget, definition.budget), budgetOverride);
    const limits = limitsOf(budget);
    // A cost or token cap counts what the whole chain spent (ctx.continueAsNew): the runs before this one, then this one.
    const spent = limits && (limits.maxCostMicroUsd !== undefined || limits.maxTokens !== undefined) ? addSpent(chainSpentIn(events), await recordedSpending(opts.journal, run.id, events)) : undefined;
    root.setBudget(budget, spent ?? chainSpentIn(events));
    root.spentKnown = spent !== undefined;
    const payload: RunResumedPayload & { budget?: BudgetOptions } = {
      holderId: holder.holderId,
      host: holder.host,
      pid: holder.pid,
      previousStatus: run.status,
      digest,
      digestChanged: digest !== run.workflowDigest,
      ...(place ? { path: place.path, cwd: place.cwd } : {}),
      ...(opts.upgraded ? { upgraded: true } : {}),
      ...(budget ? { budget } : {}),
      ...(opts.drivenBy ? { drivenBy: opts.drivenBy } : {}),
    };
    if (place?.code && digest !== run.workflowDigest) await opts.journal.code.put(place.code.files, Date.now());
    if (opts.upgraded && digest !== run.workflowDigest) {
      root.tree.upgradedFrom = run.workflowDigest;
      // The code the history was recorded with, to name a diverging step's call site in it (upgrade.ts).
      const before = await storedCode(opts.journal, run.workflowDigest).catch(() => undefined);
      if (before) root.tree.upgradedFromCode = new Map([...before.byPath].map(([p, c]) => [p, new TextDecoder().decode(c)]));
    }
    await root.tree.append({
      runId: run.id,
      type: EVENT.runResumed,
      payload,
      patch: { status: "running", endedAt: null, error: null, workflowDigest: digest },
      // Progress only, committed without waiting for the disk: lost to a power cut, the run reads as before
      // this resume, which by then has recorded nothing durable (its first durable commit syncs this too).
      durable: false,
    });
    if (payload.digestChanged) {
      opts.observer({
        type: "warning",
        runId: run.id,
        message: opts.upgraded
          ? "the run moves to the current workflow file (--upgrade); replay checks that the recorded steps still match"
          : "the workflow file changed since this run started; replay checks that the recorded steps still match",
        at: Date.now(),
      });
    }
    return root;
  }

  private static create(
    opts: DriverOptions & { tracer?: Tracer },
    lease: Lease,
    acquiredAt: number,
    definition: WorkflowDefinition,
    inputs: Record<string, unknown>,
    cursor: ReplayCursor,
    previousStatus: RunRecord["status"] | null,
  ): RootRun {
    const writer = new GroupCommitWriter(opts.journal, lease);
    const tree = new RunTree(
      opts.journal,
      lease,
      writer,
      typeof opts.executor === "function" ? opts.executor(lease, opts.journal) : (opts.executor ?? new InProcessExecutor()),
      opts.observer,
      join(opts.home, "artifacts"),
    );
    tree.config = opts.config ?? loadConfig({ home: opts.home }).config;
    if (opts.clock) tree.clock = opts.clock;
    tree.tracer = opts.tracer;
    const slotsDir = tree.config.admission?.slotsDir ?? defaultSlotsDir(opts.home);
    tree.admission = new Admission(tree.config.admission ?? {}, () => openAdmissionSlots(slotsDir));
    const keeper = new LeaseKeeper(
      opts.journal,
      lease,
      acquiredAt,
      () => tree.stop("lease_lost"),
      (err) => tree.storageFailed(err),
    );
    tree.leaseHeld = () => keeper.held();
    const execution = new RunExecution(tree, lease.rootId, definition, inputs, 0, cursor, previousStatus);
    return new RootRun(lease.rootId, tree, execution, keeper);
  }

  /** The run's budget for this drive (`spent`: what earlier drives recorded). */
  private setBudget(budget: BudgetOptions | undefined, spent?: { costMicroUsd: number; tokens: number }): void {
    this.budgetOptions = budget;
    this.execution.budget = this.tree.newLedger(limitsOf(budget), spent);
  }

  /** What a hand-over needs (ctx.continueAsNew): the options to start the next run with, and the workflow file. */
  private chainWith(opts: DriverOptions, workflowPath: string, digest: string): void {
    this.given = opts;
    this.workflowPath = workflowPath;
    this.digest = digest;
    this.tree.handOver = (inputs) => this.handOver(inputs);
  }

  /**
   * ctx.continueAsNew: the hand-over to the next run of the chain, crash-safe in three writes. (1) The
   * hand-over is recorded in this run (`continued_as_new { next, inputs }`); a resumed run whose history
   * holds it replays to the same call and hands over to that run, never a second one. (2) The next run is
   * started (`run_started` with `continuedFrom`), on the workflow file as it is now (this run's code if the
   * file is gone or does not load), with this run's budget flags and tags; unless it exists already (a
   * resume of a hand-over cut short after it). (3) The caller records this run's end (completed, continued).
   * The next run holds its lease from (2) on: `successor`, which the caller drives next; after a resume that
   * found it existing there is none, and the caller resumes it by id.
   */
  private async handOver(inputs: Record<string, unknown>): Promise<RunId> {
    const { journal } = this.tree;
    const recorded = this.execution.cursor.continuedAs;
    const next = (recorded?.next as RunId | undefined) ?? newRunId();
    const nextInputs = recorded?.inputs ?? inputs;
    if (!recorded) await this.tree.append({ runId: this.runId, type: EVENT.continuedAsNew, payload: { next, inputs: nextInputs } });
    faultPoint("continue-as-new-recorded");
    if (await journal.getRun(next)) return next;
    const loaded = await this.currentCode();
    const checked = checkedInputs(loaded.definition.inputs ?? {}, nextInputs, loaded.definition.name);
    // The chain's spending so far, which the next run's cost and token caps count on from.
    const chainSpent = this.spentKnown ? this.execution.budget.total() : addSpent(chainSpentIn(await journal.readEvents(this.runId, 0, 1)), await recordedSpending(journal, this.runId));
    this.successor = await RootRun.start(this.given, {
      definition: loaded.definition,
      workflowPath: loaded.path,
      digest: loaded.digest,
      ...(loaded.code ? { code: loaded.code } : {}),
      inputs: reviveInputs(loaded.definition.inputs ?? {}, checked),
      runId: next,
      continuedFrom: this.runId,
      chainSpent,
      ...(this.budgetOptions ? { budget: this.budgetOptions } : {}),
    });
    const tags = (await journal.tags.of([this.runId])).get(this.runId);
    if (tags && Object.keys(tags).length > 0) await journal.tags.set(next, tags, Date.now());
    faultPoint("continue-as-new-started");
    return next;
  }

  /**
   * The drive of the next run of the chain (`next`) once this one ended continued: the successor this
   * drive's hand-over started; else (a resumed hand-over found it started already) that run resumed by id
   * with this drive's options, on its pinned code, here and in this environment (the chain's). Undefined
   * when it ended already (its record says how). Throws LeaseHeldError when another process drives it.
   */
  async continuation(next: RunId): Promise<RootRun | undefined> {
    // Handed on once: this drive no longer holds it, so a chain's ended runs are not kept alive by their successors.
    const started = this.successor;
    this.successor = undefined;
    if (started) return started;
    const { journal } = this.tree;
    const run = await journal.getRun(next);
    if (!run || TERMINAL_STATUSES.includes(run.status)) return undefined;
    const events = await journal.readEvents(next);
    const loader = codeLoading.loader;
    if (!loader) throw new Error(`run ${next} continues run ${this.runId}, and this process cannot load workflow code to resume it`);
    const loaded = (await loader.pinned(journal, this.given.home, run.workflowDigest, run.workflowPath)) ?? (await loader.file(run.workflowPath));
    return RootRun.resume(this.given, run, loaded.definition, loaded.digest, undefined, { path: loaded.path, cwd: process.cwd() }, events);
  }

  /** The workflow file as it is now (loaded from a pinned copy when it changed: an import is cached per path), else this run's code. */
  private async currentCode(): Promise<LoadedCode> {
    const mine = { definition: this.execution.definition, path: this.workflowPath, digest: this.digest };
    const loader = codeLoading.loader;
    try {
      // A builtin is part of the binary; the test kit's workflows have no file.
      if (!isAbsolute(this.workflowPath) || !loader) return mine;
      const code = collectCode(this.workflowPath);
      if (code.version === mine.digest) return mine;
      await this.tree.journal.code.put(code.files, Date.now());
      const loaded = await loader.pinned(this.tree.journal, this.given.home, code.version, this.workflowPath);
      return loaded ?? mine;
    } catch (err) {
      this.tree.observer({ type: "warning", runId: this.runId, message: `the next run keeps this run's code: ${errorInfo(err).message}`, at: Date.now() });
      return mine;
    }
  }



  /**
   * Execute the workflow to its end (or stop), then release the lease. A
   * drive that lost its lease ends "interrupted" (resumable), naming the
   * process that drives the run now, if one does; its stages and its pool
   * are gone by then.
   */
  async run(): Promise<RunOutcome> {
    this.startBackgroundWork();
    let outcome: RunOutcome;
    try {
      outcome = await this.execution.execute();
    } finally {
      this.stopBackgroundWork();
      this.tree.budget.close();
      this.tree.admission.close();
      await this.tree.writer.flush().catch(() => {});
      await this.tree.executor.close().catch(() => {});
      if (this.tree.stopReason !== "lease_lost" || this.tree.storageFault) {
        // Whatever escaped its stage's process group (setsid) does not outlive the drive. Not after a lost
        // lease: what carries the run's id then may be the new holder's. After a storage fault the lease
        // is still ours (released if the journal takes that write; otherwise resume finds its holder gone).
        if (this.tree.stagesExecuted) endRunProcesses(this.runId);
        await this.tree.journal.releaseLease(this.tree.lease).catch(() => {});
      }
      // The drive's spans go out before the process may exit (bounded: a receiver that is down does not hold it);
      // those that did not get through are counted in the journal, for /metrics (journal/counters.ts).
      const dropped = (await this.tree.tracer?.flush()) ?? 0;
      if (dropped > 0) await this.tree.journal.counters.add("trace_spans_dropped", dropped).catch(() => {});
    }
    return this.tree.stopReason === "lease_lost" ? this.lostOutcome() : outcome;
  }

  /**
   * Leave the run to the local service instead of executing it here (`run --detach`, `resume --detach`):
   * what start or resume recorded stays (the run_started or run_resumed event, a raised budget), and the
   * lease is given up, so nobody drives the run until the service takes it over (src/service/recovery.ts).
   */
  async detach(): Promise<void> {
    await this.tree.writer.flush();
    this.tree.budget.close();
    this.tree.admission.close();
    await this.tree.executor.close().catch(() => {});
    await this.tree.journal.releaseLease(this.tree.lease);
  }

  private async lostOutcome(): Promise<RunOutcome> {
    const { lease, journal } = this.tree;
    const now = await journal.getLease(lease.rootId).catch(() => undefined);
    const holder = now && now.epoch > lease.epoch ? { holderId: now.holderId, host: now.host, pid: now.pid } : undefined;
    const error = new LeaseLostError(lease.rootId, lease.epoch, holder ? { holder } : { expired: this.keeper.loss === "deadline" });
    return { runId: this.runId, status: "interrupted", error: errorInfo(error) };
  }

  private startBackgroundWork(): void {
    this.keeper.start();
    // One timer for both looks, not one each: an idle root wakes once per period for them.
    this.controlTimer = setInterval(() => {
      if (!this.tree.checkStorage() && !this.applyingControl) void this.controlNow();
    }, CONTROL_POLL_MS);
    // `atomic pause` asks over intercom (a `control` request: tree-mail.ts) and gets its answer once applied.
    this.tree.applyControl = () => this.controlNow();
  }

  /**
   * Applies a new control revision from another process: cancel stops the
   * run; pause/unpause gate new steps here and on every worker; a stage's
   * pause/unpause (run-control.ts) gates that stage's attempts and holds its
   * running agent after its turn. Once
   * applied everywhere, the revision is recorded as acknowledged
   * (runs.controlAck), which is what `atomic pause` waits for.
   */
  /** A stage paused under an earlier drive of the run. */
  pauseStage(path: string): void {
    this.tree.setStagePaused(path, true);
  }

  /** A control pass now, after the one running (if any); resolves with the revision applied by then. */
  private controlNow(): Promise<number> {
    const pass = this.controlPasses.then(() => this.pollControl());
    this.controlPasses = pass;
    return pass.then(() => this.appliedControlRev);
  }

  private async pollControl(): Promise<void> {
    this.applyingControl = true;
    try {
      const run = await this.tree.journal.getRun(this.runId);
      if (!run || run.controlRev <= this.appliedControlRev) return;
      const rev = run.controlRev;
      const request = parseControl(run.control);
      if (request.run === "cancel") {
        this.tree.stop("cancelled");
        this.appliedControlRev = rev;
        return;
      }
      const paused = request.run === "pause";
      this.tree.setPaused(paused);
      if (request.stage) this.tree.setStagePaused(request.stage.path, request.stage.paused);
      await this.tree.executor.applyControl?.(rev, paused);
      this.appliedControlRev = rev;
      await this.tree.append({
        runId: this.runId,
        type: EVENT.controlApplied,
        payload: { rev, action: run.control },
        patch: { controlAck: rev },
      });
    } catch {
      // a failed poll is retried at the next tick
    } finally {
      this.applyingControl = false;
    }
  }

  private stopBackgroundWork(): void {
    this.keeper.stop();
    clearInterval(this.controlTimer);
  }
}

/**
 * A fork's copy of an old run's start record or checkpoint, for the new run
 * (with its stage index row). It keeps its time, so `show` gives the reused
 * step the timings it had; the new run's row reads as last changed then
 * until its first live step (or its end) is recorded.
 */
function seedEntry(runId: RunId, e: JournalEvent, seed: ForkSeed): AppendEntry {
  const payload = { ...(e.payload as Record<string, unknown>), reusedFrom: seed.origin.runId };
  const row = e.type === EVENT.checkpoint && e.key !== null ? seed.stages.get(e.key) : undefined;
  const stage: StageIndexEntry | undefined = row && {
    key: row.key,
    path: row.path,
    name: row.name,
    kind: row.kind,
    state: row.state,
    attempt: row.attempt,
    ...(row.childRunId ? { childRunId: row.childRunId } : {}),
    ...(row.outcome ? { outcome: row.outcome } : {}),
    ...(row.usage ? { usage: row.usage } : {}),
  };
  return { runId, type: e.type, key: e.key, payload, at: e.at, ...(stage ? { stage } : {}) };
}

/** A stage attempt or a child run began: processes of the run may have been started. */
function startedProcesses(e: JournalEvent): boolean {
  if (e.type !== EVENT.stepStarted) return false;
  const kind = (e.payload as { kind?: string }).kind;
  return kind === "stage" || kind === "child";
}

/** The budget a run recorded: its last resume's, else its start's. */
/** What the chain's runs before this one spent, as its `run_started` recorded it (ctx.continueAsNew; none for a run that continues nothing). */
function chainSpentIn(events: readonly JournalEvent[]): Spent {
  const first = events[0];
  const recorded = first?.type === EVENT.runStarted ? (first.payload as { chainSpent?: Partial<Spent> }).chainSpent : undefined;
  return { costMicroUsd: recorded?.costMicroUsd ?? 0, tokens: recorded?.tokens ?? 0 };
}

function addSpent(a: Spent, b: Spent): Spent {
  return { costMicroUsd: a.costMicroUsd + b.costMicroUsd, tokens: a.tokens + b.tokens };
}

function recordedBudget(events: readonly JournalEvent[]): BudgetOptions | undefined {
  let budget: BudgetOptions | undefined;
  for (const e of events) {
    if (e.type !== EVENT.runStarted && e.type !== EVENT.runResumed) continue;
    const b = (e.payload as { budget?: BudgetOptions }).budget;
    if (b) budget = b;
  }
  return budget;
}

function leaseMs(opts: DriverOptions): number {
  return opts.leaseTimeoutMs ?? DEFAULT_LEASE_MS;
}

export function assertResumable(run: RunRecord): void {
  if (run.parentId) {
    throw new UsageError("not_root", `run ${run.id} is a child workflow run`, {
      hint: `resume its root run instead: atomic resume ${run.rootId}`,
    });
  }
  if (run.status === "completed") {
    throw new UsageError("already_completed", `run ${run.id} already completed; there is nothing to resume`, {
      hint: `see its outputs with: atomic show ${run.id}`,
    });
  }
  if (run.status === "cancelled") {
    throw new UsageError("run_cancelled", `run ${run.id} was cancelled and cannot be resumed`, {
      hint: "start a new run with: atomic run <workflow file>",
    });
  }
}

/** The options with traces, when they are on: the observer also feeds the tracer (tracing/tracing.ts). */
async function traced(given: DriverOptions): Promise<DriverOptions & { tracer?: Tracer }> {
  const opts = { ...given, config: given.config ?? loadConfig({ home: given.home }).config };
  const tracer = await loadTracer(opts.config.telemetry);
  if (!tracer) return opts;
  const show = opts.observer;
  return {
    ...opts,
    tracer,
    observer: (event) => {
      show(event);
      tracer.observe(event);
    },
  };
}
