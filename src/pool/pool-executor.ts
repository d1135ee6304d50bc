/**
 * The root's side of the worker pool: a StageExecutor that runs stages on
 * worker processes.
 *
 * The stage step enqueues the work item in the journal together with the
 * stage's start record (`queued` tells it to); this executor starts the
 * coordinator on first use (re-executing the binary), nudges it, and waits
 * for that item's `work_done`. Live runner events arrive in batches, each
 * capped (event-batcher.ts). The pool starts with the run's first stage
 * (prepare()), so a run whose steps never use a stage (ctx.tool only)
 * starts no process.
 *
 * If the coordinator dies, every stage waiting on it ends with the
 * infrastructure fault `worker_lost` naming the coordinator's log. The
 * stage step retries such a fault (stage.ts); a retry waits for a fresh
 * pool: after a short backoff a new coordinator starts (it appends to the
 * same log), and the retry goes on once it and one of its workers are up.
 * At most MAX_POOLS coordinators per drive; after that, and after a pool
 * that failed for good (`fatal`, or one that did not start), every stage
 * fails at once and the run fails resumably.
 *
 * Nothing waits for ever: a stage the root has heard nothing of (no result,
 * no live event) for a lease period is asked about (`work_status`). The
 * coordinator answers from its workers and the work queue: still running or
 * queued (wait on), settled (its `work_done` comes now if it never did), or
 * gone (the stage fails with worker_lost and is retried). A coordinator that does not
 * answer within another period (at least STATUS_ANSWER_MS), not counting
 * this process's own stalls, is killed, and the run fails resumably as
 * above.
 *
 * The pool's life (idle, starting, running, lost, restarting, closed) is an
 * explicit state machine (pool-executor-state.ts).
 */

import { STDOUT_LOG } from "../artifacts/stage-logs.ts";
import type { Subprocess } from "bun";
import { closeSync, mkdirSync, openSync } from "node:fs";
import { join } from "node:path";
import type { StageExecutor } from "../runners/stage-executor.ts";
import type { DeliveryMode, RunnerEvent, StageRequest, WrapUpReason } from "../runners/types.ts";
import type { StageResult } from "../sdk/types.ts";
import { POOL_PROTOCOL_VERSION, parseMessage } from "./protocol/common.ts";
import { FromCoordinatorSchema, type CoordinatorConfig, type FromCoordinator, type ToCoordinator } from "./protocol/root-coordinator.ts";
import { ROLE, selfCommand } from "../shared/self-exec.ts";
import { trace } from "./trace.ts";
import { isInfraCode, type InfraCode } from "../shared/errors.ts";
import { StallMonitor } from "./stall-monitor.ts";
import { capEvents } from "./event-batcher.ts";
import { childEnv } from "../shared/config/environment.ts";
import { Machine } from "../shared/state-machine.ts";
import { oncePerTick } from "../shared/once-per-tick.ts";
import { POOL_EVENTS, POOL_STATES, POOL_TRANSITIONS, type PoolEvent, type PoolState } from "./pool-executor-state.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";
import { CONFIG_DEFAULTS } from "../shared/config/schema.ts";

export const HEARTBEAT_MS = 1_000;
export const DEFAULT_WORK_LEASE_MS = 30_000;
/**
 * A pool worker's heartbeat (the renewal of its stage's lease) under a lease of `leaseMs`: three per lease,
 * never more often than HEARTBEAT_MS. Each heartbeat is a message, a receipt and a journal write for every
 * running stage; at one a second, a 30 s lease was renewed thirty times over, and an agent stage of minutes
 * paid a journal write per second. Three renewals per lease still leave the worker two more chances after a
 * late one before its local deadline (work-lease-deadline.ts: the lease less a fifth).
 */
export function heartbeatFor(leaseMs: number): number {
  return Math.max(HEARTBEAT_MS, Math.floor(leaseMs / 3));
}
/** A lease must outlive at least two heartbeats. */
export const MIN_WORK_LEASE_MS = 2 * HEARTBEAT_MS;
export const MAX_GENERATIONS = 3;
const START_TIMEOUT_MS = 20_000;
/** Coordinators one drive of a run may start (the first, then one per lost pool). */
const MAX_POOLS = 10;
/** Before a fresh pool starts: 250 ms, doubling per pool started, at most 2 s (a pool that keeps dying does not spin). */
const RESTART_BACKOFF: Backoff = { firstMs: 250, maxMs: 2_000, jitter: 0.2 };
const CONTROL_TIMEOUT_MS = 15_000;
/** Batches of live events kept per item whose execute() has not registered yet (about 250 ms each). */
const MAX_EARLY_BATCHES = 64;
const DELIVER_TIMEOUT_MS = 5_000;
/**
 * The least time a coordinator gets to answer a work_status: its answer may
 * need one journal read, which waits up to the journal's busy timeout (10 s)
 * while another process holds the database.
 */
const STATUS_ANSWER_MS = 15_000;

export interface PoolOptions {
  home: string;
  rootId: string;
  /** The epoch of the root's lease this pool serves (CoordinatorConfig.rootEpoch). */
  rootEpoch: number;
  journalUrl?: string;
  workers: number;
  leaseMs?: number;
  /** How long a spawned worker gets to say it is ready (config timeouts.workerStartMs; its default otherwise). */
  startupTimeoutMs?: number;
  /** Only items of these queues (a shared journal: worker hosts serve the rest). */
  queues?: string[];
}

/** Why the pool is gone: the sentence its stages fail with, their code, whether a fresh pool may replace it, and the log that says more. */
interface Lost {
  why: string;
  code: InfraCode;
  restartable: boolean;
  log?: string;
}

interface Waiting {
  request: StageRequest;
  resolve: (result: StageResult) => void;
  onEvent: (event: RunnerEvent) => void;
  /** When the root last heard of the item (a batch of its events). */
  heardAt: number;
  /** An outstanding work_status question: when it was asked, and this process's stall counter then. */
  asked?: { at: number; stalledMs: number };
}

/** What a stage that comes after the drive closed its pool gets (the pool is not started again). */
const CLOSED: Lost = { why: "the worker pool was closed", code: "worker_lost", restartable: false };

export class PoolExecutor implements StageExecutor {
  readonly queued = true;
  readonly protocol = POOL_PROTOCOL_VERSION;
  private readonly machine = new Machine<PoolState, PoolEvent>("the worker pool", POOL_TRANSITIONS, POOL_STATES.idle);
  /** The coordinator (from starting on; kept when lost, so close() can still shut it down). */
  private proc: Subprocess | undefined;
  /** Its start: resolves once it is up (starting, running). */
  private ready: Promise<void> | undefined;
  /** Why the pool is gone, the infrastructure code its stages fail with, and whether a fresh pool may replace it (lost, restarting; closed after a loss). */
  private lost: Lost | undefined;
  /** Coordinators started so far (this drive). */
  private pools = 0;
  /** The back-off and start of a fresh pool, shared by every stage that waits for it (restarting). */
  private restarting: Promise<void> | undefined;
  /** The last control revision applied: a fresh pool gets it too. */
  private control: { rev: number; paused: boolean } | undefined;
  /** Tells the coordinator that items are ready, and how many stages wait on it: once per burst (a fan-out of 500 stages sends a few messages, not 500). */
  private readonly nudge = oncePerTick(() => this.send({ type: "work_ready", stages: this.waiting.size }));
  private readonly waiting = new Map<string, Waiting>();
  private readonly controlWaiters = new Map<number, () => void>();
  /** Results that arrived before their stage's execute() registered (the item is enqueued a moment earlier). */
  private readonly early = new Map<string, StageResult>();
  /**
   * Live events that arrived before their stage's execute() registered, in
   * batches, handed to it when it does: a worker may start the item (its
   * `started`, the stage's first output) while the root is still writing the
   * attempt's records (a pool coming up on a resumed run claims the item at
   * once). Dropped, they left the stage "queued" for as long as it ran.
   */
  private readonly earlyEvents = new Map<string, RunnerEvent[][]>();
  /** Pending live deliveries by work id and message id. */
  private readonly deliveries = new Map<string, (delivered: boolean) => void>();
  readonly logDir: string;
  /** This process's event-loop stalls: an answer that waited behind them is not the coordinator's fault. */
  private stall: StallMonitor | undefined;

  constructor(private readonly opts: PoolOptions) {
    this.logDir = join(opts.home, "artifacts", opts.rootId, "worker-logs");
  }

  async execute(request: StageRequest, signal: AbortSignal, onEvent: (event: RunnerEvent) => void): Promise<StageResult> {
    const workId = request.workId;
    if (!workId) throw new Error("internal: a pooled stage needs a work item id");
    try {
      // A retry after the pool was lost waits for a fresh one (not failing at once, as every retry would).
      if (this.machine.is(POOL_STATES.lost, POOL_STATES.restarting)) await this.restart();
      if (this.machine.is(POOL_STATES.idle)) await this.start();
      else if (this.machine.is(POOL_STATES.starting)) await this.ready;
    } catch (err) {
      return this.lostResult(request, this.lost ?? { why: err instanceof Error ? err.message : String(err), code: "worker_lost", restartable: false });
    }
    if (!this.machine.is(POOL_STATES.running)) return this.lostResult(request, this.lost ?? CLOSED);
    // The item was committed to the queue before this call: a fast worker may already have finished it.
    const earlyEvents = this.earlyEvents.get(workId) ?? [];
    this.earlyEvents.delete(workId);
    const early = this.early.get(workId);
    if (early) {
      this.early.delete(workId);
      for (const batch of earlyEvents) for (const e of batch) onEvent(e);
      return early;
    }
    const result = new Promise<StageResult>((resolve) => this.waiting.set(workId, { request, resolve, onEvent, heardAt: Date.now() }));
    for (const batch of earlyEvents) for (const e of batch) onEvent(e);
    const onAbort = () => this.send({ type: "cancel_work", workId, reason: String(signal.reason ?? "cancelled") });
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    trace("ready_sent", workId);
    this.nudge();
    try {
      return await result;
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.waiting.delete(workId);
    }
  }

  /**
   * A message for a running stage: forwarded to the worker that runs it;
   * "not_running" when no attempt of it is out on a worker (the engine then
   * keeps the message queued) or the worker does not answer in time.
   */
  async deliver(stage: { runId: string; stageKey: string }, message: { id: string; text: string }, mode: DeliveryMode): Promise<"delivered" | "not_running"> {
    const workId = [...this.waiting].find(([, w]) => w.request.runId === stage.runId && w.request.stageKey === stage.stageKey)?.[0];
    if (!workId || !this.machine.is(POOL_STATES.starting, POOL_STATES.running)) return "not_running";
    const key = `${workId}\u0000${message.id}`;
    const answer = new Promise<boolean>((resolve) => {
      this.deliveries.set(key, resolve);
      setTimeout(() => resolve(false), DELIVER_TIMEOUT_MS).unref();
    });
    this.send({ type: "deliver", workId, message, mode });
    const delivered = await answer;
    this.deliveries.delete(key);
    return delivered ? "delivered" : "not_running";
  }

  /** The budget ran out: the stage's worker wraps its agent up. */
  async wrapUp(stage: { runId: string; stageKey: string }, text: string, reason: WrapUpReason): Promise<void> {
    for (const [workId, w] of this.waiting) {
      if (w.request.runId === stage.runId && w.request.stageKey === stage.stageKey) this.send({ type: "wrap_up", workId, text, reason });
    }
  }

  /** The stage was paused or unpaused: the worker running it tells its runner (RunnerHandle.hold). */
  async holdStage(stage: { runId: string; stageKey: string }, held: boolean): Promise<void> {
    for (const [workId, w] of this.waiting) {
      if (w.request.runId === stage.runId && w.request.stageKey === stage.stageKey) this.send({ type: "hold", workId, held });
    }
  }

  /** The root counted a budgeted result, or its budget ran out: the coordinator's claims wait for this (dispatcher.ts). */
  budgetCounted(workId: string | undefined, exhausted: boolean): void {
    this.send({ type: "budget_counted", ...(workId ? { workId } : {}), exhausted });
  }

  /** The root is stopping: the coordinator's journal statements stop waiting out an outage too. */
  stopWaiting(): void {
    if (this.machine.is(POOL_STATES.starting, POOL_STATES.running)) this.send({ type: "stop_waiting" });
  }

  /** Apply control revision `rev` on every worker; resolves when the coordinator acknowledged it (or it is not running). */
  async applyControl(rev: number, paused: boolean): Promise<void> {
    this.control = { rev, paused };
    if (!this.machine.is(POOL_STATES.starting, POOL_STATES.running)) return; // a fresh pool gets it when it starts
    const acked = new Promise<void>((resolve) => {
      this.controlWaiters.set(rev, resolve);
      setTimeout(resolve, CONTROL_TIMEOUT_MS).unref();
    });
    this.send({ type: "control", rev, paused });
    await acked;
    this.controlWaiters.delete(rev);
  }

  /**
   * Every lease period: asks about each stage not heard of for that long,
   * and gives up on a coordinator that left a question unanswered for a
   * whole period (not counting this process's own stalls).
   */
  private reconcile(period: number): void {
    if (!this.machine.is(POOL_STATES.starting, POOL_STATES.running)) return;
    const now = Date.now();
    const stalled = this.stall?.stalledMs ?? 0;
    for (const [workId, w] of this.waiting) {
      if (w.asked) {
        const limit = Math.max(period, STATUS_ANSWER_MS);
        if (now - w.asked.at - (stalled - w.asked.stalledMs) <= limit) continue;
        const why = `the pool coordinator did not answer within ${limit} ms where stage "${w.request.stageName}" is`;
        this.markLost({ why, code: "worker_lost", restartable: true, log: join(this.logDir, "coordinator.log") });
        this.proc?.kill("SIGKILL");
        return;
      }
      if (now - w.heardAt < period) continue;
      w.asked = { at: now, stalledMs: stalled };
      this.send({ type: "work_status", workId });
    }
  }

  async close(): Promise<void> {
    this.machine.fire(POOL_EVENTS.close);
    this.stopReconciling();
    const proc = this.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    this.send({ type: "shutdown" });
    const timer = setTimeout(() => proc.kill("SIGKILL"), 5_000);
    await proc.exited;
    clearTimeout(timer);
  }

  /** The run's first stage is about to be recorded: boot the coordinator and workers meanwhile. */
  prepare(): void {
    if (!this.machine.is(POOL_STATES.idle)) return; // started already, lost, or closed
    this.start().catch(() => {}); // a failed start is reported by execute()
  }

  /**
   * A fresh pool in place of a lost one (one at a time, shared by every
   * stage that waits for it). Resolves at once, leaving the pool lost, when
   * the loss is not restartable or the drive has used its pools up: its
   * stages then fail at once.
   */
  private restart(): Promise<void> {
    if (this.machine.is(POOL_STATES.restarting)) return this.restarting!;
    if (!this.machine.is(POOL_STATES.lost) || !this.lost?.restartable || this.pools >= MAX_POOLS) return Promise.resolve();
    this.machine.fire(POOL_EVENTS.restart);
    this.restarting = (async () => {
      await Bun.sleep(backoffDelay(RESTART_BACKOFF, this.pools - 1));
      if (this.machine.is(POOL_STATES.closed)) return;
      this.proc = undefined;
      this.ready = undefined;
      this.lost = undefined;
      this.early.clear(); // results of the lost pool's items: their stages already failed
      this.earlyEvents.clear();
      await this.start(true);
      if (this.control?.paused) this.send({ type: "control", ...this.control });
    })().finally(() => {
      this.restarting = undefined;
    });
    return this.restarting;
  }

  /** Starts a coordinator (idle or restarting); `afterLoss`: resolves once one of its workers is up too (the retry needs one). */
  private start(afterLoss = false): Promise<void> {
    this.machine.fire(POOL_EVENTS.start);
    this.pools++;
    this.ready = new Promise<void>((resolve, reject) => {
      try {
        this.spawnCoordinator(afterLoss, resolve, reject);
      } catch (err) {
        // No coordinator (its log cannot be made, the binary cannot be spawned): a fresh try would fail the same way.
        this.markLost({ why: err instanceof Error ? err.message : String(err), code: "worker_lost", restartable: false });
        reject(err);
      }
    });
    return this.ready;
  }

  /** The body of start(): spawns the coordinator and wires its messages and exit to the pool's machine. */
  private spawnCoordinator(afterLoss: boolean, resolve: () => void, reject: (err: Error) => void): void {
    this.stopReconciling(); // a lost pool's timers
    // 0700: this may be the first directory of a fresh home (made before the journal), which must be the owner's alone.
    mkdirSync(this.logDir, { recursive: true, mode: 0o700 });
    const config: CoordinatorConfig = {
      version: POOL_PROTOCOL_VERSION,
      rootId: this.opts.rootId,
      rootEpoch: this.opts.rootEpoch,
      home: this.opts.home,
      ...(this.opts.journalUrl ? { journalUrl: this.opts.journalUrl } : {}),
      workers: this.opts.workers,
      leaseMs: this.opts.leaseMs ?? DEFAULT_WORK_LEASE_MS,
      heartbeatMs: heartbeatFor(this.opts.leaseMs ?? DEFAULT_WORK_LEASE_MS),
      retireGraceMs: 10_000,
      maxGenerations: MAX_GENERATIONS,
      startupTimeoutMs: this.opts.startupTimeoutMs ?? CONFIG_DEFAULTS.timeouts.workerStartMs,
      logDir: this.logDir,
      ...(this.opts.queues ? { queues: this.opts.queues } : {}),
    };
    const logPath = join(this.logDir, "coordinator.log");
    // The reconcile runs on the stall monitor's timer: its own lateness is the stall it must not charge.
    this.stall = new StallMonitor(config.leaseMs);
    this.stall.runs(() => this.reconcile(config.leaseMs));
    // Appended to: the log keeps every coordinator of this drive (a lost one's last words included).
    const logFd = openSync(logPath, "a", 0o600);
    let versionOk = false;
    // Set right after the spawn (the process's messages and exit come later, from the event loop).
    let timer: ReturnType<typeof setTimeout> | undefined;
    // The configuration (home, journal URL) goes through the environment, never argv (self-exec.ts); the
    // environment as it is now (ATOMIC_ROOT_RUN_ID included: shared/run-processes.ts).
    let proc: Subprocess;
    try {
      proc = Bun.spawn(selfCommand(ROLE.coordinator), {
        env: childEnv({ ATOMIC_POOL_CONFIG: JSON.stringify(config) }),
        stdin: "ignore",
        stdout: "ignore",
        stderr: logFd,
        serialization: "json",
        ipc: (raw) => {
          if (this.proc !== proc) return; // a lost pool's last messages
          const msg = parseMessage(FromCoordinatorSchema, raw, "coordinator");
          if (!msg) return;
          if (msg.type === "ready" || msg.type === "worker_up") {
            if (msg.type === "ready" && msg.version !== POOL_PROTOCOL_VERSION) {
              clearTimeout(timer);
              const why = `the pool coordinator speaks protocol ${msg.version}, not ${POOL_PROTOCOL_VERSION}`;
              this.markLost({ why, code: "worker_lost", restartable: false }); // a fresh one would be the same binary
              reject(new Error(why));
              return;
            }
            if (msg.type === "ready") versionOk = true;
            if (versionOk && (msg.type === "worker_up" || !afterLoss)) {
              clearTimeout(timer);
              // Up, unless it was lost or closed meanwhile (its stages then see that state, not a running pool).
              if (this.machine.is(POOL_STATES.starting)) this.machine.fire(POOL_EVENTS.up);
              resolve();
            }
            return;
          }
          this.onCoordinator(msg);
        },
        onExit: (_p, code, signal) => {
          if (this.proc !== proc) return;
          clearTimeout(timer);
          this.stopReconciling();
          const how = signal ? `was killed by signal ${signal}` : `exited with code ${code}`;
          // Brief: the log is named once, by the run's failure (its hint), not quoted into every attempt's error.
          const why = `the pool coordinator ${how}`;
          this.markLost({ why, code: "worker_lost", restartable: true, log: logPath });
          reject(new Error(this.lost?.why ?? why));
        },
      });
    } finally {
      closeSync(logFd);
    }
    this.proc = proc;
    timer = setTimeout(() => {
      const why = `the pool coordinator did not start within ${START_TIMEOUT_MS} ms`;
      this.markLost({ why, code: "worker_lost", restartable: false, log: logPath });
      reject(new Error(why));
      proc.kill("SIGKILL");
    }, START_TIMEOUT_MS);
  }

  private liveEvents(workId: string, events: RunnerEvent[]): void {
    const w = this.waiting.get(workId);
    // Capped here too: whatever a coordinator sends, the root takes in at most one batch's worth per stage.
    if (!w) {
      // Its execute() has not registered yet: kept for it (the first batches; `started` is in the first).
      const kept = this.earlyEvents.get(workId) ?? [];
      if (kept.length < MAX_EARLY_BATCHES) kept.push(capEvents(events));
      this.earlyEvents.set(workId, kept);
      return;
    }
    w.heardAt = Date.now();
    for (const e of capEvents(events)) w.onEvent(e);
  }

  private onCoordinator(msg: Exclude<FromCoordinator, { type: "ready" | "worker_up" }>): void {
    switch (msg.type) {
      case "work_events":
        for (const { workId, events } of msg.batch) this.liveEvents(workId, events as RunnerEvent[]);
        break;
      case "work_done":
        for (const item of msg.items) {
          trace("done", item.workId);
          if (item.events) this.liveEvents(item.workId, item.events as RunnerEvent[]);
          const w = this.waiting.get(item.workId);
          if (w) w.resolve(item.result as StageResult);
          else this.early.set(item.workId, item.result as StageResult); // its execute() has not registered yet
        }
        break;
      case "work_status": {
        const w = this.waiting.get(msg.workId);
        if (!w) break;
        w.heardAt = Date.now();
        w.asked = undefined;
        if (msg.state === "gone") {
          const why = `the work queue holds no live item for stage "${w.request.stageName}" (work ${msg.workId})`;
          w.resolve(this.lostResult(w.request, { why, code: "worker_lost", restartable: true }));
        }
        break;
      }
      case "deliver_result":
        this.deliveries.get(`${msg.workId}\u0000${msg.messageId}`)?.(msg.delivered);
        break;
      case "control_ack":
        this.controlWaiters.get(msg.rev)?.();
        break;
      case "fatal":
        // Its code when it is an infrastructure fault's (storage_unavailable, worker_startup_failed): the run says why.
        // Not replaced by a fresh pool: what failed it (the journal, workers that cannot start) would fail that one too.
        // A journal that takes no writes is said as it is: the run stops on it (steps/stage.ts).
        if (msg.code === "storage_unavailable") this.markLost({ why: msg.message, code: msg.code, restartable: false });
        else this.markLost({ why: `the worker pool failed (${msg.code}): ${msg.message}`, code: isInfraCode(msg.code) ? msg.code : "worker_lost", restartable: false });
        break;
    }
  }

  private stopReconciling(): void {
    this.stall?.stop();
  }

  /**
   * The pool is lost: every stage waiting on it fails with `lost`. A second
   * loss changes nothing; after close() the first one is only recorded (a
   * stage still waiting at start is told why), and no waiting stage fails
   * on its account.
   */
  private markLost(lost: Lost): void {
    const { from, to } = this.machine.fire(POOL_EVENTS.lose);
    if (to === POOL_STATES.closed) this.lost ??= lost;
    if (from === to) return;
    this.lost = lost;
    this.stopReconciling();
    for (const w of this.waiting.values()) w.resolve(this.lostResult(w.request, lost));
  }

  private lostResult(request: StageRequest, { why, code, log }: Lost): StageResult {
    return {
      status: "failed",
      text: "",
      exitCode: null,
      outputPath: join(request.artifactDir, STDOUT_LOG),
      error: { code, message: why, ...(log ? { log } : {}) },
    };
  }

  private send(msg: ToCoordinator): void {
    try {
      this.proc?.send(msg);
    } catch {
      // the coordinator is gone: onExit reports it
    }
  }
}
