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
 * Outgoing: `ready`, live runner events coalesced per item (EventBatcher,
 * about every 250 ms; an item's pending events are flushed before its
 * `work_done`), `work_done` once per item (done() remembers which were
 * answered), `deliver_result`,
 * `work_status`, `control_ack` and `fatal`.
 *
 * The items settled in one turn of the event loop go in one `work_done`,
 * sent at the end of the turn (setImmediate), or before any other message
 * (so the root sees every message in the order it was sent): with several
 * workers finishing short stages at once, that is a message, and a wake-up
 * of the root, for several stages.
 *
 * While the pool has more of the root's work queued (the worker whose
 * result this is was handed its next item in the same transaction), a
 * result is not on the root's critical path: the workers stay busy whether
 * or not the root hears of it now, and a stage the root would start in
 * answer would queue behind that work anyway. It then waits for the next
 * message to the root (a long stage's `started`, a control answer) or at
 * most COALESCE_MS, whichever comes first; a result that left the queue
 * empty (its worker is idle now), or any other, goes at the end of the turn
 * as before, and takes those waiting with it. So the root hears of a busy
 * pool's results in batches of tens, not one or two at a time, and records
 * them in as many commits. Measured with 500 shell stages on 4 workers
 * (bench/pool.ts, interleaved pairs): against a message per turn, a 10 ms
 * window cut the makespan by 7 % and the CPU by 6 % (30 pairs); 25 ms and
 * 50 ms cut 3 % and 7 % more (20 pairs), 100 and 200 ms nothing more. A
 * sequential workflow, and a fan-out whose next stages wait for earlier
 * results (a concurrency limit), leave the queue empty at each result, so
 * nothing of theirs waits; views of a busy run see its results up to
 * COALESCE_MS late.
 */

import type { RunnerEvent } from "../runners/types.ts";
import type { StageResult } from "../sdk/types.ts";
import type { CoordinatorCore, RootLink } from "./coordinator-core.ts";
import { EventBatcher } from "./event-batcher.ts";
import { assertNever, parseMessage } from "./protocol/common.ts";
import { ToCoordinatorSchema, type FromCoordinator, type ToCoordinator } from "./protocol/root-coordinator.ts";

const EVENT_BATCH_MS = 250;
/** The longest a result waits for company while the pool has more of the root's work queued (see above). */
const COALESCE_MS = 50;

export interface RootHandlers {
  /** Opens the journal the first time the root has work for the pool; later calls do nothing. */
  attach(): void;
  control(rev: number, paused: boolean): void;
  shutdown(why: string): void;
}

export class RootChannel implements RootLink {
  private readonly events = new Map<string, EventBatcher>();
  /** Items whose `work_done` was sent or is about to be (ids only: a few bytes per stage of the run). */
  private readonly answered = new Set<string>();
  /** Results settled and not sent yet: at the end of this turn, or (all coalescing) with the next message. */
  private settled: Extract<FromCoordinator, { type: "work_done" }>["items"] = [];
  /** Whether a send of `settled` at the end of this turn is due (else only the coalescing timer is). */
  private dueThisTurn = false;
  private coalescing: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly core: CoordinatorCore,
    private readonly handlers: RootHandlers,
  ) {}

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
        void dispatcher.dispatch();
        break;
      case "cancel_work": {
        this.handlers.attach();
        const slot = workers.running(msg.workId);
        if (slot) slot.send({ type: "cancel", workId: msg.workId, reason: msg.reason });
        else dispatcher.cancelQueued(msg.workId);
        break;
      }
      case "deliver": {
        const slot = workers.running(msg.workId);
        if (slot) slot.send(msg);
        else this.send({ type: "deliver_result", workId: msg.workId, messageId: msg.message.id, delivered: false });
        break;
      }
      case "wrap_up":
        workers.running(msg.workId)?.send(msg);
        break;
      case "work_status":
        void dispatcher.status(msg.workId);
        break;
      case "control":
        this.handlers.control(msg.rev, msg.paused);
        break;
      case "shutdown":
        this.handlers.shutdown("the run ended");
        break;
      default:
        assertNever(msg);
    }
  }

  send(msg: FromCoordinator): void {
    this.flush();
    if (process.connected) process.send?.(msg);
  }

  /** Sends every settled result now, those waiting for company too. */
  flush(): void {
    clearTimeout(this.coalescing);
    this.coalescing = undefined;
    this.dueThisTurn = false;
    if (this.settled.length === 0) return;
    const items = this.settled;
    this.settled = [];
    if (process.connected) process.send?.({ type: "work_done", items } satisfies FromCoordinator);
  }

  /**
   * A live runner event of `workId`, sent on with the next batch. `hold`:
   * the item's result follows at once, so even a `started` waits for it
   * and rides on its `work_done`.
   */
  event(workId: string, event: RunnerEvent, opts: { hold?: boolean } = {}): void {
    let b = this.events.get(workId);
    if (!b) {
      b = new EventBatcher(EVENT_BATCH_MS, (events) => this.send({ type: "work_events", batch: [{ workId, events }] }));
      this.events.set(workId, b);
    }
    b.push(event);
    // A stage leaving the queue is news for every view of the run: not held back for the batch.
    if (event.type === "started" && !opts.hold) b.flush();
  }

  /**
   * The item's result, once, carrying its pending live events (the root
   * applies them first). A second call sends nothing: the channel is
   * ordered and loses nothing, so the root has it. `moreQueued`: the pool
   * has more of the root's work queued, so the result may wait for company
   * (see above).
   */
  done(workId: string, result: StageResult, opts: { moreQueued?: boolean } = {}): void {
    if (this.answered.has(workId)) return;
    this.answered.add(workId);
    const events = this.events.get(workId)?.take() ?? [];
    this.events.delete(workId);
    this.settled.push({ workId, result, ...(events.length > 0 ? { events } : {}) });
    if (!opts.moreQueued) {
      if (!this.dueThisTurn) setImmediate(() => this.dueThisTurn && this.flush());
      this.dueThisTurn = true;
    } else this.coalescing ??= setTimeout(() => this.flush(), COALESCE_MS);
  }

}
