/**
 * The root's StageExecutor on a journal with worker hosts (../journal/fleet.ts):
 * a stage's work item may be run by the root's own pool (`local`, a
 * PoolExecutor claiming the default queue; none with `--workers 0`) or by any
 * worker host that serves its queue. Whichever ends it first answers.
 *
 * - Hearing of remote stages: a LISTEN on the root's channel plus a poll
 *   every POLL_MS while stages are out (a lost notification costs a poll
 *   period). Each sync takes the root's messages up (live events, delivery
 *   answers) and then reads which of its items settled: a settled item's
 *   result is its committed outcome in the queue (dispatcher.ts resultOf).
 * - The root also gives back its own items whose lease expired (a host that
 *   crashed or was cut off), so a run needs no live host to see a lost item
 *   move on, and fail with worker_retry_limit after the last generation.
 * - A result of the local pool that says its pool lost the stage is taken
 *   only if no worker host holds or settled the item; otherwise the host's
 *   outcome is awaited (the local pool never ran it).
 * - Cancel: an item nobody claimed yet is settled here (without `local`),
 *   one a host runs gets `cancel_work` down (a cancel that cannot reach the
 *   journal, down past its retry window, ends the root's wait at once:
 *   the drive is stopping, and the host's result waits in its outbox); deliver and wrap-up go down to
 *   the host that runs the item; pause holds the root's items for every
 *   host.
 * - Budgets (StageRequest.budgeted): a host's commit of a budgeted result
 *   holds claims of this root (the `result:` claim hold, ../journal/fleet.ts)
 *   until the root counted it (`budgetCounted`: the hold goes, or becomes
 *   `spent` when the budget is used up). A stage stopped because the budget
 *   ran out (CANCEL_IF_QUEUED) is taken off the queue if nobody claimed it,
 *   now or whenever it is ready again (its host lost); one a host runs goes
 *   on. A drive clears the budget holds an earlier drive of its root left.
 *
 * How it hears of remote stages (idle, connecting, listening, polling,
 * closed) and its syncs (idle, syncing, pending) are two explicit state
 * machines (fleet-executor-state.ts).
 */

import { join } from "node:path";
import { DEFAULT_QUEUE, type FleetStore } from "../journal/fleet.ts";
import { hostOfWorker } from "../journal/fleet-view.ts";
import type { WorkItem, WorkQueue } from "../journal/work-queue.ts";
import { CANCEL_IF_QUEUED, type StageExecutor, type StageToolsHandler } from "../runners/stage-executor.ts";
import type { DeliveryMode, RunnerEvent, StageRequest, WrapUpReason } from "../runners/types.ts";
import { STDOUT_LOG } from "../artifacts/stage-logs.ts";
import type { StageResult } from "../sdk/types.ts";
import { isInfraCode } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { resultOf } from "../pool/dispatcher.ts";
import { capEvents } from "../pool/event-batcher.ts";
import { MAX_GENERATIONS, type PoolExecutor } from "../pool/pool-executor.ts";
import { POOL_PROTOCOL_VERSION, parseMessage } from "../pool/protocol/common.ts";
import { FromCoordinatorSchema, type ToCoordinator } from "../pool/protocol/root-coordinator.ts";
import { Machine } from "../shared/state-machine.ts";
import { oncePerTick } from "../shared/once-per-tick.ts";
import {
  HEARING_EVENTS,
  HEARING_STATES,
  HEARING_TRANSITIONS,
  SYNC_EVENTS,
  SYNC_STATES,
  SYNC_TRANSITIONS,
  type HearingEvent,
  type HearingState,
  type SyncEvent,
  type SyncState,
} from "./fleet-executor-state.ts";

const POLL_MS = 1_000;
const DELIVER_TIMEOUT_MS = 5_000;
/** The worker id under which the root takes a cancelled item nobody claimed off the queue. */
const SETTLER_ID = "root";

interface Waiting {
  request: StageRequest;
  resolve: (result: StageResult) => void;
  onEvent: (event: RunnerEvent) => void;
}

export interface FleetExecutorOptions {
  fleet: FleetStore;
  work: WorkQueue;
  rootId: RunId;
  leaseMs: number;
  /** The root's own pool, when it has workers (`--workers N`). */
  local?: PoolExecutor;
}

/** A stage the root stopped while the journal was unreachable: its end on its host is not known here. */
function unreachable(request: StageRequest, err: unknown): StageResult {
  return {
    status: "cancelled",
    text: "",
    exitCode: null,
    outputPath: join(request.artifactDir, STDOUT_LOG),
    error: { code: "storage_unavailable", message: `stopped while the journal was unreachable (${err instanceof Error ? err.message : String(err)})` },
  };
}

/** Whether a worker id is a worker host's (host.ts: `<worker>@<host id>`). */
export function isHostWorker(workerId: string | null | undefined): boolean {
  return hostOfWorker(workerId) !== undefined;
}

export class FleetExecutor implements StageExecutor {
  readonly queued = true;
  readonly protocol = POOL_PROTOCOL_VERSION;
  private readonly waiting = new Map<string, Waiting>();
  private readonly deliveries = new Map<string, (delivered: boolean) => void>();
  /** Items stopped because the budget ran out: settled as cancelled whenever they are found ready. */
  private readonly cancelIfQueued = new Set<string>();
  /** An earlier drive's budget holds of this root, cleared before this drive's first stage waits. */
  private holdsCleared: Promise<void> | undefined;
  private readonly hearing = new Machine<HearingState, HearingEvent>("the fleet executor's listener", HEARING_TRANSITIONS, HEARING_STATES.idle);
  private readonly syncs = new Machine<SyncState, SyncEvent>("the fleet executor's sync", SYNC_TRANSITIONS, SYNC_STATES.idle);
  /** The LISTEN connection (listening). */
  private listener: { close(): Promise<void> } | undefined;
  /** The poll (every hearing state but idle and closed). */
  private timer: ReturnType<typeof setInterval> | undefined;
  /** Tells the hosts that work is ready: once per burst of stages. */
  private readonly wakeHosts = oncePerTick(() => {
    this.o.fleet.wakeHosts().catch(() => {});
  });

  /** The driver's side of its stages' run tool calls (StageExecutor.serveStageTools), once a stage was granted one. */
  private stageTools: StageToolsHandler | undefined;

  constructor(private readonly o: FleetExecutorOptions) {}

  serveStageTools(handle: StageToolsHandler): void {
    this.stageTools = handle;
  }

  /** A host's stage called a run tool (tools-relay.ts): the driver acts, and its result goes down to the item. */
  private stageToolCall(call: { workId: string; callId: string; token: string; tool: string; args: Record<string, unknown> }): void {
    const handle = this.stageTools;
    const outcome = handle ? handle(call.token, call.tool, call.args) : Promise.resolve({ ok: false, output: "error: this run's driver serves no run tools" });
    void outcome
      .catch((err: unknown) => ({ ok: false, output: `error: ${err instanceof Error ? err.message : String(err)}` }))
      .then((o) => this.down(call.workId, { type: "stage_tool_result", callId: call.callId, ok: o.ok, output: o.output }))
      .catch(() => {}); // the database away: the host's call ends with its stage
  }

  /** The root's own pool serves the default queue only, and only with workers (`--workers N`). */
  hostQueue(request: StageRequest): string | undefined {
    const queue = request.queue ?? DEFAULT_QUEUE;
    return this.o.local && queue === DEFAULT_QUEUE ? undefined : queue;
  }

  prepare(): void {
    this.o.local?.prepare();
    this.clearHolds();
    this.watch();
  }

  /** A result of a budgeted stage was counted: its claim hold goes (and the `spent` one comes), then the root's own pool goes on. */
  budgetCounted(workId: string | undefined, exhausted: boolean): void {
    void this.o.fleet
      .budgetCounted(this.o.rootId, workId, exhausted)
      .catch(() => {}) // the database is away: the result's hold ends by itself (RESULT_HOLD_MS)
      .finally(() => this.o.local?.budgetCounted(workId, exhausted));
  }

  async execute(request: StageRequest, signal: AbortSignal, onEvent: (event: RunnerEvent) => void): Promise<StageResult> {
    const workId = request.workId;
    if (!workId) throw new Error("internal: a queued stage needs a work item id");
    this.clearHolds();
    await this.holdsCleared;
    this.watch();
    const remote = new Promise<StageResult>((resolve) => this.waiting.set(workId, { request, resolve, onEvent }));
    this.wakeHosts();
    const onAbort = () => void this.cancel(workId, String(signal.reason ?? "cancelled"));
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    try {
      if (!this.o.local) return await remote;
      const local = this.o.local.execute(request, signal, onEvent).then(async (r) => ((await this.localCounts(workId, r)) ? r : remote));
      return await Promise.race([local, remote]);
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.waiting.delete(workId);
    }
  }

  async deliver(stage: { runId: string; stageKey: string }, message: { id: string; text: string }, mode: DeliveryMode): Promise<"delivered" | "not_running"> {
    if (this.o.local && (await this.o.local.deliver(stage, message, mode)) === "delivered") return "delivered";
    const workId = this.find(stage);
    if (!workId || !isHostWorker((await this.o.work.get(workId).catch(() => undefined))?.workerId)) return "not_running";
    const key = `${workId}\u0000${message.id}`;
    const answer = new Promise<boolean>((resolve) => {
      this.deliveries.set(key, resolve);
      setTimeout(() => resolve(false), DELIVER_TIMEOUT_MS).unref();
    });
    try {
      await this.down(workId, { type: "deliver", workId, message, mode });
      return (await answer) ? "delivered" : "not_running";
    } finally {
      this.deliveries.delete(key);
    }
  }

  async wrapUp(stage: { runId: string; stageKey: string }, text: string, reason: WrapUpReason): Promise<void> {
    await this.o.local?.wrapUp(stage, text, reason);
    const workId = this.find(stage);
    if (workId) await this.down(workId, { type: "wrap_up", workId, text, reason }).catch(() => {});
  }

  async holdStage(stage: { runId: string; stageKey: string }, held: boolean): Promise<void> {
    await this.o.local?.holdStage(stage, held);
    const workId = this.find(stage);
    if (workId) await this.down(workId, { type: "hold", workId, held }).catch(() => {});
  }

  async applyControl(rev: number, paused: boolean): Promise<void> {
    await Promise.all([this.o.local?.applyControl(rev, paused), this.o.fleet.hold(this.o.rootId, paused).catch(() => {})]);
  }

  /** The root is stopping: its own pool stops waiting for the journal too (the fleet's reads are the root's journal's). */
  stopWaiting(): void {
    this.o.local?.stopWaiting();
  }

  async close(): Promise<void> {
    this.hearing.fire(HEARING_EVENTS.close);
    clearInterval(this.timer);
    await Promise.all([this.o.local?.close(), this.listener?.close(), this.o.fleet.releaseHolds(this.o.rootId, "all").catch(() => {})]);
  }

  // ---------------------------------------------------------------- internals

  private find(stage: { runId: string; stageKey: string }): string | undefined {
    return [...this.waiting].find(([, w]) => w.request.runId === stage.runId && w.request.stageKey === stage.stageKey)?.[0];
  }

  private down(workId: string, msg: ToCoordinator): Promise<void> {
    return this.o.fleet.postDown(this.o.rootId, workId, msg);
  }

  /** The local pool's result stands unless it only says the pool lost the stage while a host holds or settled it. */
  private async localCounts(workId: string, result: StageResult): Promise<boolean> {
    if (result.workerId || !isInfraCode(result.error?.code ?? "")) return true;
    const item = await this.o.work.get(workId).catch(() => undefined);
    return !isHostWorker(item?.workerId);
  }

  private clearHolds(): void {
    this.holdsCleared ??= this.o.fleet.releaseHolds(this.o.rootId, "budget").catch(() => {});
  }

  /**
   * One item the root stops: settled here when nobody claimed it (no local pool to do it), else cancelled where it
   * runs; stopped because the budget ran out, one that runs goes on (and one the local pool holds is its to settle).
   */
  private async cancel(workId: string, reason: string): Promise<void> {
    try {
      if (reason === CANCEL_IF_QUEUED) {
        this.cancelIfQueued.add(workId);
        await this.settleIfReady(workId);
        return;
      }
      if (!this.o.local) {
        const item = await this.o.work.claimItem(workId, SETTLER_ID, this.o.leaseMs);
        if (item) return await this.settleCancelled(item);
      }
      await this.down(workId, { type: "cancel_work", workId, reason });
      this.wake();
    } catch (err) {
      // The database is away (past its retry window): nothing can reach the host nor hear of the stage's end, so
      // the root stops waiting for it (its drive is stopping too; the host's result waits in the host's outbox).
      const w = this.waiting.get(workId);
      w?.resolve(unreachable(w.request, err));
    }
  }

  /** Settles an item stopped by the budget if it is ready (nobody claimed it, or its host was lost and it came back). */
  private async settleIfReady(workId: string): Promise<void> {
    const item = await this.o.work.claimItem(workId, SETTLER_ID, this.o.leaseMs);
    if (item) await this.settleCancelled(item);
  }

  private async settleCancelled(item: WorkItem): Promise<void> {
    const request = item.descriptor as StageRequest;
    const result: StageResult = {
      status: "cancelled",
      text: "",
      exitCode: null,
      outputPath: join(request.artifactDir, STDOUT_LOG),
      error: { code: "cancelled", message: "cancelled before it started" },
    };
    await this.o.work.complete({ id: item.id, workerId: SETTLER_ID, generation: item.generation, epoch: item.epoch }, { state: "failed", result }, { id: `cancelled:${item.id}`, digest: "cancelled" });
    this.waiting.get(item.id)?.resolve(result);
  }

  /** Starts listening and polling (once, with the first stage). */
  private watch(): void {
    if (!this.hearing.is(HEARING_STATES.idle)) return;
    this.hearing.fire(HEARING_EVENTS.watch);
    this.timer = setInterval(() => {
      if (this.waiting.size > 0) this.wake();
      if (this.hearing.is(HEARING_STATES.polling)) {
        this.hearing.fire(HEARING_EVENTS.relisten);
        void this.listen();
      }
    }, POLL_MS);
    this.timer.unref();
    void this.listen();
  }

  /** One attempt to LISTEN (hearing is connecting). */
  private async listen(): Promise<void> {
    let listener: { close(): Promise<void> };
    try {
      listener = await this.o.fleet.listen(() => this.wake(), {
        root: this.o.rootId,
        onLost: () => {
          this.listener = undefined;
          this.hearing.fire(HEARING_EVENTS.lost);
        },
      });
    } catch {
      this.hearing.fire(HEARING_EVENTS.lost); // polled meanwhile; listened again at the next tick
      return;
    }
    // Closed meanwhile, or the attempt's connection was reported lost: what it made is not kept.
    if (!this.hearing.is(HEARING_STATES.connecting)) return void listener.close().catch(() => {});
    this.hearing.fire(HEARING_EVENTS.listened);
    this.listener = listener;
  }

  /** Syncs with the queue now (or again right after the sync under way). */
  private wake(): void {
    if (this.syncs.fire(SYNC_EVENTS.wake).from === SYNC_STATES.idle) this.runSync();
  }

  private runSync(): void {
    void this.sync().finally(() => {
      if (this.syncs.fire(SYNC_EVENTS.done).to === SYNC_STATES.syncing) this.runSync();
    });
  }

  private lastReap = 0;

  private async sync(): Promise<void> {
    if (this.hearing.is(HEARING_STATES.closed) || this.waiting.size === 0) return;
    const { fleet, rootId } = this.o;
    try {
      for (const body of await fleet.takeUp(rootId)) {
        const msg = parseMessage(FromCoordinatorSchema, body, "a worker host");
        if (msg?.type === "work_events") {
          for (const { workId, events } of msg.batch) {
            const w = this.waiting.get(workId);
            if (w) for (const e of capEvents(events as RunnerEvent[])) w.onEvent(e);
          }
        } else if (msg?.type === "deliver_result") {
          this.deliveries.get(`${msg.workId}\u0000${msg.messageId}`)?.(msg.delivered);
        } else if (msg?.type === "stage_tool_call") {
          this.stageToolCall(msg);
        }
      }
      if (Date.now() - this.lastReap >= POLL_MS / 2) {
        this.lastReap = Date.now();
        await fleet.reapExpired(MAX_GENERATIONS, {
          name: "WorkerRetryLimit",
          code: "worker_retry_limit",
          message: `the stage's worker host stopped renewing its lease ${MAX_GENERATIONS} times (crashed or cut off)`,
        }, rootId);
      }
      for (const workId of this.cancelIfQueued) {
        if (this.waiting.has(workId)) await this.settleIfReady(workId);
        else this.cancelIfQueued.delete(workId);
      }
      const settled = await fleet.settled([...this.waiting.keys()]);
      for (const item of settled) this.waiting.get(item.id)?.resolve(resultOf(item));
      if (settled.length > 0) await fleet.dropDown(settled.map((i) => i.id)).catch(() => {});
    } catch {
      // the database is away: the next poll tries again
    }
  }
}
