/**
 * State shared by every run of one run tree (a root run and its child
 * runs), which one process drives under one lease: the journal writer, the
 * stage executor, the observer, and the stop signal.
 *
 * Stopping: `stop(reason)` aborts the tree's signal once. Steps waiting on
 * it reject with CancelledError; running stages are cancelled (their
 * process groups killed); no new step starts. The reason decides how the
 * runs end: "interrupted" (Ctrl-C: resumable), "cancelled" (atomic cancel:
 * final), "lease_lost" (another process took over: write nothing more).
 * A journal file deleted or replaced under the run (`checkStorage`) stops it
 * as "lease_lost" too: nothing more is written, and the root run's end
 * raises the storage fault instead of reporting an outcome nobody can read.
 * So does a journal that stopped taking writes (`storageFailed`: a full
 * disk, a home gone read-only, a truncated file; met by an append, a lease
 * renewal or the pool): the run stays resumable once storage is back.
 */

import { WALL_CLOCK, type Clock } from "./clock.ts";
import type { AppendEntry } from "../journal/append.ts";
import { AppendLatency } from "./append-latency.ts";
import type { Journal } from "../journal/journal.ts";
import type { Lease } from "../journal/runs.ts";
import type { RunId } from "../shared/ids.ts";
import { redactValue, secretsKnown } from "../shared/secrets.ts";
import { EVENT } from "./journal-events.ts";
import type { GroupCommitWriter } from "../journal/group-commit.ts";
import { CancelledError, LeaseLostError, StorageError } from "../shared/errors.ts";
import type { EngineObserver } from "./observer.ts";
import type { Tracer } from "./tracing/types.ts";
import type { StageExecutor } from "../runners/stage-executor.ts";
import type { WrapUpReason } from "../runners/types.ts";
import { TreeMail } from "./tree-mail.ts";
import type { MailTree } from "./mail/mail-tree.ts";
import type { AtomicConfig } from "../shared/config/schema.ts";
import type { Admission } from "./admission.ts";
import { writeStopped } from "../journal/sqlite/storage-errors.ts";
import { TRUNCATED_HINT, truncatedHint } from "../journal/sqlite/file-identity.ts";
import { BudgetLedger, WRAP_UP_TEXT, type BudgetLimits, type Spent } from "./budget.ts";

export type StopReason = "interrupted" | "cancelled" | "lease_lost";

export class RunTree implements MailTree {
  private readonly controller = new AbortController();
  stopReason: StopReason | undefined;
  /**
   * False once this drive may no longer hold its lease (the driver's local
   * deadline passed, lease-keeper.ts; that also stops the tree): asked before
   * anything with an effect outside the journal starts.
   */
  leaseHeld: () => boolean = () => true;
  /** Set once a stage of this tree was handed to the executor (its processes may outlive it: driver.ts). */
  stagesExecuted = false;
  /**
   * `resume --upgrade` to other code: the code version the run was pinned to before. A drive that then
   * diverges from the journal gives the run its old version back (run-execution.ts recordEnd), so a plain
   * resume runs the code the history was recorded with again.
   */
  upgradedFrom: string | undefined;
  /** With `upgradedFrom`: the files of that code by path relative to the workflow's directory, to name where a step was called. */
  upgradedFromCode: ReadonlyMap<string, string> | undefined;
  /**
   * ctx.continueAsNew of the root run: records the hand-over, starts the next run of the chain and answers
   * its id (the driver sets it: driver.ts handOver). Throws when the next run cannot start (the run fails).
   */
  handOver: ((inputs: Record<string, unknown>) => Promise<RunId>) | undefined;
  /** Applies the run's control row now (the driver sets it: driver.ts controlNow); the revision applied by then. */
  applyControl: (() => Promise<number>) | undefined;
  /** While paused no new step starts; running ones go on. Waiters resume on unpause or stop. */
  private pauseGate: { promise: Promise<void>; open: () => void } | undefined;
  /**
   * Paused stages by path from the root (`atomic pause RUN STAGE`): one that has not started waits at its
   * start; a running agent stage whose runner can hold (RunnerHandle.hold) waits after its current turn.
   */
  private readonly stageGates = new Map<string, { promise: Promise<void>; open: () => void }>();

  /** Messages to this tree's stages and its open questions (intercom). */
  readonly mail: TreeMail = new TreeMail(this);

  /** Runners, models, prices and admission limits (the driver sets it; empty: defaults). */
  config: AtomicConfig = {};
  /** What durable timers (ctx.sleep) read: the wall clock unless the driver was given another (../clock.ts). */
  clock: Clock = WALL_CLOCK;
  /** When agent stages may start (sessions per run and per user, host pressure); the driver sets it, with the slot store. */
  admission!: Admission;
  /** Traces, when they are on (tracing/tracing.ts): the stage step starts each attempt's span through it. */
  tracer: Tracer | undefined;
  /** The root run's budget ledger; child runs hang theirs under it (budget.ts). */
  budget: BudgetLedger;
  /** Live agent stage attempts, with the ledger they spend against: wrapped up when it runs out. */
  private readonly liveAgents = new Map<string, { runId: string; stageKey: string; path: string; ledger: BudgetLedger; wrapped: WrapUpReason | undefined }>();

  constructor(
    readonly journal: Journal,
    readonly lease: Lease,
    readonly writer: GroupCommitWriter,
    readonly executor: StageExecutor,
    readonly observer: EngineObserver,
    /** Root of per-run artifact directories (`$ATOMIC_HOME/artifacts`). */
    readonly artifactsDir: string,
  ) {
    this.budget = this.newLedger(undefined);
  }

  /** The root ledger, with limits and what earlier drives of the run spent. */
  newLedger(limits: BudgetLimits | undefined, initial?: Spent): BudgetLedger {
    this.budget?.close();
    const ledger = new BudgetLedger(
      this.lease.rootId,
      limits,
      undefined,
      (runId, message) => this.observer({ type: "warning", runId, message, at: Date.now() }),
      initial,
    );
    ledger.onExhausted = () => {
      this.wrapUpExhausted();
      // The run's own budget is used up: the pool claims nothing more (queued stages are taken off the queue: steps/stage.ts).
      if (this.budget.exhausted()) this.executor.budgetCounted?.(undefined, true);
    };
    this.budget = ledger;
    return ledger;
  }

  /** An agent stage attempt runs: it is wrapped up if its ledger runs out while it does. */
  agentStarted(id: string, runId: string, stageKey: string, path: string, ledger: BudgetLedger): void {
    this.liveAgents.set(id, { runId, stageKey, path, ledger, wrapped: undefined });
    if (ledger.exhausted()) this.wrapUpExhausted();
  }

  agentEnded(id: string): void {
    this.liveAgents.delete(id);
  }

  /**
   * Every live agent stage whose ledger (or an ancestor's) is used up is
   * wrapped up, saying which limit ran out: a spending cap lets its model
   * call in flight finish (its usage is recorded), the time limit aborts it
   * (docs/design/engine.md, Budgets). One wrapped up for spending is
   * wrapped up again when the time runs out too.
   */
  private wrapUpExhausted(): void {
    for (const a of this.liveAgents.values()) {
      if (a.wrapped === "time" || !a.ledger.exhausted()) continue;
      const reason: WrapUpReason = a.ledger.timeUpError() ? "time" : "spending";
      if (a.wrapped === reason) continue;
      a.wrapped = reason;
      void this.executor.wrapUp?.({ runId: a.runId, stageKey: a.stageKey }, WRAP_UP_TEXT, reason);
    }
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Set when the journal is no longer the file this process opened (the run stopped; its end raises this). */
  storageFault: StorageError | undefined;

  /** Stops the tree when its journal was deleted or replaced; returns the fault (called periodically and at the end). */
  checkStorage(): StorageError | undefined {
    const fault = this.storageFault ?? this.journal.storageFault();
    if (fault && !this.storageFault) {
      this.storageFault = fault.hint === TRUNCATED_HINT ? new StorageError("storage_unavailable", fault.message, { hint: this.hintFor(fault, true), cause: fault }) : fault;
      this.stop("lease_lost");
    }
    return this.storageFault;
  }

  /**
   * What to tell about a journal that stopped taking writes: a truncated or
   * damaged file what resume does with what it still holds; a backend that
   * gave up waiting (stopsRun: Postgres names its server) its own hint; a
   * deleted or replaced file its own; the embedded journal's disk otherwise.
   */
  private hintFor(fault: StorageError, changed: boolean): string | undefined {
    const resume = `atomic resume ${this.lease.rootId}`;
    if (fault.hint === TRUNCATED_HINT || /is damaged or was truncated/.test(fault.message)) return truncatedHint(resume);
    if (changed) return fault.hint;
    if (fault.stopsRun && fault.hint) return `${fault.hint}: ${resume}`;
    return `free space on its disk (or make the home writable again), then resume the run: ${resume}`;
  }

  /**
   * A journal write failed in a way waiting will not cure (writeStopped):
   * the tree stops as on a lost lease (nothing more is written) and the
   * root's end raises the fault. Returns whether `err` was such a fault.
   */
  storageFailed(err: unknown): boolean {
    if (!(err instanceof StorageError)) return false;
    // The file itself deleted, replaced or truncated: that is the cause to name (SQLite says "disk I/O error").
    const changed = this.journal.storageFault();
    const fault = changed ?? writeStopped(err);
    if (!fault) return false;
    if (!this.storageFault) {
      const hint = this.hintFor(fault, changed !== undefined);
      this.storageFault = new StorageError("storage_unavailable", fault.message, { ...(hint ? { hint } : {}), cause: fault });
      this.stop("lease_lost");
    }
    return true;
  }

  stop(reason: StopReason): void {
    if (this.stopReason) return;
    this.stopReason = reason;
    // Interrupted (SIGTERM, Ctrl-C): the process ends soon, so an unreachable journal is not waited for.
    if (reason === "interrupted") {
      this.journal.stopWaiting?.();
      this.executor.stopWaiting?.();
    }
    this.controller.abort(reason);
    this.setPaused(false);
    for (const path of [...this.stageGates.keys()]) this.setStagePaused(path, false);
  }

  get paused(): boolean {
    return this.pauseGate !== undefined;
  }

  setPaused(paused: boolean): void {
    if (paused === this.paused) return;
    if (paused) {
      let open!: () => void;
      const promise = new Promise<void>((resolve) => (open = resolve));
      this.pauseGate = { promise, open };
    } else {
      const gate = this.pauseGate;
      this.pauseGate = undefined;
      gate?.open();
    }
    this.observer({ type: paused ? "paused" : "unpaused", runId: this.lease.rootId, at: Date.now() });
  }

  /** Resolves at once unless the run is paused; then when it is unpaused or stopped. */
  async whilePaused(): Promise<void> {
    while (this.pauseGate) await this.pauseGate.promise;
  }

  stagePaused(path: string): boolean {
    return this.stageGates.has(path);
  }

  /** Pause or unpause the stage at `path`: its live agent attempts are told to hold after their turn, or to go on. */
  setStagePaused(path: string, paused: boolean): void {
    if (paused === this.stagePaused(path)) return;
    if (paused) {
      let open!: () => void;
      const promise = new Promise<void>((resolve) => (open = resolve));
      this.stageGates.set(path, { promise, open });
    } else {
      const gate = this.stageGates.get(path);
      this.stageGates.delete(path);
      gate?.open();
    }
    for (const a of this.liveAgents.values()) if (a.path === path) this.holdStage(a, paused);
  }

  /** Tell a running attempt of a stage to hold after its turn, or to go on (a runner that cannot hold goes on). */
  holdStage(stage: { runId: string; stageKey: string }, paused: boolean): void {
    void this.executor.holdStage?.({ runId: stage.runId, stageKey: stage.stageKey }, paused).catch(() => {});
  }

  /** Resolves at once unless the stage at `path` is paused; then when it is unpaused or the tree stopped. */
  async whileStagePaused(path: string): Promise<void> {
    for (let gate = this.stageGates.get(path); gate; gate = this.stageGates.get(path)) await gate.promise;
  }

  /** The error a step raises when it may not start or was stopped. */
  stoppedError(): CancelledError | LeaseLostError {
    if (this.stopReason === "lease_lost") return new LeaseLostError(this.lease.rootId, this.lease.epoch);
    return new CancelledError(
      this.stopReason === "cancelled" ? "the run was cancelled" : "the run was interrupted",
      this.stopReason ?? "cancelled",
    );
  }

  /** How long this drive's appends took (recorded with the root's end record). */
  readonly appendLatency = new AppendLatency();

  /** Append one entry through the group-commit writer; fails loudly on anything but "appended". */
  async append(entry: AppendEntry): Promise<number> {
    let outcome: Awaited<ReturnType<GroupCommitWriter["append"]>>;
    try {
      const t0 = performance.now();
      outcome = await this.writer.append(redactEntry(entry));
      this.appendLatency.observe(performance.now() - t0);
    } catch (err) {
      if (this.storageFailed(err)) throw this.stoppedError();
      throw err;
    }
    if (outcome.status === "appended") return outcome.seq;
    if (outcome.status === "error") {
      throw new StorageError("storage_unavailable", `could not record ${entry.type} for run ${entry.runId}: ${outcome.error.message}`, {
        hint: "check the disk and the journal file, then resume the run",
      });
    }
    throw new StorageError("storage_unavailable", `unexpected ${outcome.status} while recording ${entry.type} for run ${entry.runId}`);
  }
}

/**
 * What the journal keeps of an entry: known secret values (shared/secrets.ts)
 * are redacted from its payload and the run's error and outputs. Not from a
 * checkpoint's result, which replays into workflow code and must come back
 * as it was returned (a stage's result is redacted before the workflow sees
 * it: steps/stage.ts), nor from the inputs or the work item's descriptor
 * (a stage's `env` may carry a value the stage asked for by name).
 */
function redactEntry(entry: AppendEntry): AppendEntry {
  if (!secretsKnown()) return entry;
  let payload = entry.payload;
  if (entry.type === EVENT.checkpoint && isRecord(payload)) {
    const { result, ...rest } = payload;
    const redacted = redactValue(rest);
    if (redacted !== rest) payload = { ...redacted, result };
  } else payload = redactValue(payload);
  const patch = entry.patch && redactValue(entry.patch);
  if (payload === entry.payload && patch === entry.patch) return entry;
  return { ...entry, payload, ...(patch ? { patch } : {}) };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
