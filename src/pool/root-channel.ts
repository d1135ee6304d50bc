/**
 * The coordinator's channel to its root (the process that started it), over
 * IPC; the messages are in protocol/root-coordinator.ts.
 *
 * Incoming: `work_ready` (opens the journal the first time, then
 * dispatches), `cancel_work` (to the worker running the item, or settled by
 * the dispatcher when none does), `deliver` and `wrap_up` (to the worker
 * running the item; a delivery to none is answered "not delivered" at
 * once), `control` (pause/unpause, acknowledged once every worker has) and
 * `shutdown`. A disconnect means the root is gone: the coordinator shuts
 * down.
 *
 * `work_status` (the root heard nothing of an item for a while) is answered
 * by the dispatcher from the queue and the workers.
 *
 * Outgoing: `ready`, live runner events (each batch of a worker's as it
 * comes: the worker coalesces and caps them, about every 250 ms, so a second
 * batching here only cost a timer and a copy of each event; the events that
 * come with an item's result ride on its `work_done`), `work_done` once per
 * item (done() remembers which were answered), `deliver_result`,
 * `work_status`, `control_ack` and `fatal`.
 *
 * Each result goes to the root as it settles, in a `work_done` of its
 * own (the message holds a list: the root takes several alike). A window
 * that held results back to send them in batches served bench/pool.ts's
 * 500 no-op stages; agent stages settle hundreds of milliseconds apart.
 *
 * A second done() for an item comes within seconds of the first: a
 * worker's `complete` retried before its receipt arrived (every 2 s), or a
 * `work_status` the root sent before it read the `work_done` (the two
 * cross in the IPC channel). So the answered ids are kept in two
 * generations, the current one and the one before, which is dropped every
 * ANSWERED_KEEP_MS (a minute): a coordinator holds the ids of at most its
 * last two minutes of results, however many stages it runs (about 100
 * bytes an item: a fan-out of 10,000 short stages held all of them when
 * the generations were 5 minutes long, bench/README.md "shell-fanout"),
 * while a duplicate within a minute still sends nothing. One later still
 * is harmless: the root keeps a result nobody waits for until its pool
 * ends (pool-executor.ts, `early`).
 */

import { CANCEL_IF_QUEUED } from "../runners/stage-executor.ts";
import type { RunnerEvent } from "../runners/types.ts";
import type { StageResult } from "../sdk/types.ts";
import type { CoordinatorCore, RootLink } from "./coordinator-core.ts";
import { assertNever, parseMessage } from "./protocol/common.ts";
import { ToCoordinatorSchema, type FromCoordinator, type ToCoordinator } from "./protocol/root-coordinator.ts";

/** How long an answered item is remembered at least (at most twice that). */
export const ANSWERED_KEEP_MS = 60_000;

export interface RootHandlers {
  /** Opens the journal the first time the root has work for the pool; later calls do nothing. */
  attach(): void;
  control(rev: number, paused: boolean): void;
  shutdown(why: string): void;
  /** The root is stopping: the journal is not waited for any more (connection.ts, stopRetrying). */
  stopWaiting(): void;
}

export class RootChannel implements RootLink {
  /** Events that came with an item's result, for its `work_done`. */
  private readonly held = new Map<string, RunnerEvent[]>();
  /** Items whose `work_done` was sent or is about to be, since `rotatedAt`; and those of the generation before. */
  private answered = new Set<string>();
  private answeredBefore = new Set<string>();
  private rotatedAt: number;

  constructor(
    private readonly core: CoordinatorCore,
    private readonly handlers: RootHandlers,
    private readonly now: () => number = Date.now,
  ) {
    this.rotatedAt = now();
  }

  listen(): void {
    process.on("message", (raw: unknown) => {
      const msg = parseMessage(ToCoordinatorSchema, raw, "root");
      if (msg) this.onMessage(msg);
    });
    process.on("disconnect", () => this.handlers.shutdown("the root process went away"));
  }

  private onMessage(msg: ToCoordinator): void {
    const { workers, dispatcher } = this.core;
    switch (msg.type) {
      case "work_ready":
        this.handlers.attach(); // the first time: dispatches once the journal is open
        workers.want(msg.stages);
        void dispatcher.dispatch();
        break;
      case "cancel_work": {
        this.handlers.attach();
        const slot = workers.running(msg.workId);
        if (slot) {
          if (msg.reason !== CANCEL_IF_QUEUED) slot.send({ type: "cancel", workId: msg.workId, reason: msg.reason });
        } else dispatcher.cancelQueued(msg.workId);
        break;
      }
      case "deliver": {
        const slot = workers.running(msg.workId);
        if (slot) slot.send(msg);
        else this.send({ type: "deliver_result", workId: msg.workId, messageId: msg.message.id, delivered: false });
        break;
      }
      case "wrap_up":
      case "hold":
        workers.running(msg.workId)?.send(msg);
        break;
      case "work_status":
        void dispatcher.status(msg.workId);
        break;
      case "control":
        this.handlers.control(msg.rev, msg.paused);
        break;
      case "budget_counted":
        dispatcher.budgetCounted(msg.workId, msg.exhausted);
        break;
      case "shutdown":
        this.handlers.shutdown("the run ended");
        break;
      case "stop_waiting":
        this.handlers.stopWaiting();
        break;
      case "stage_tool_result":
        break; // worker hosts only (fleet/tools-relay.ts): a run's own pool reaches its driver through the broker
      default:
        assertNever(msg);
    }
  }

  send(msg: FromCoordinator): void {
    if (process.connected) process.send?.(msg);
  }

  /**
   * A worker's batch of live runner events of `workId`, sent on at once.
   * `hold`: the item's result follows at once, so they wait for it and ride
   * on its `work_done`.
   */
  events(workId: string, events: RunnerEvent[], opts: { hold?: boolean } = {}): void {
    if (events.length === 0) return;
    if (!opts.hold) return this.send({ type: "work_events", batch: [{ workId, events }] });
    const held = this.held.get(workId);
    if (held) held.push(...events);
    else this.held.set(workId, events);
  }

  /**
   * The item's result, once, carrying its pending live events (the root
   * applies them first). A second call sends nothing: the channel is
   * ordered and loses nothing, so the root has it.
   */
  done(workId: string, result: StageResult): void {
    if (this.answered.has(workId) || this.answeredBefore.has(workId)) return;
    if (this.now() - this.rotatedAt >= ANSWERED_KEEP_MS) {
      this.answeredBefore = this.answered;
      this.answered = new Set();
      this.rotatedAt = this.now();
    }
    this.answered.add(workId);
    const events = this.held.get(workId) ?? [];
    this.held.delete(workId);
    this.send({ type: "work_done", items: [{ workId, result, ...(events.length > 0 ? { events } : {}) }] });
  }

  /** How many answered items are remembered (for tests). */
  remembered(): number {
    return this.answered.size + this.answeredBefore.size;
  }
}
