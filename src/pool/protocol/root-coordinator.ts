/**
 * Root ↔ pool coordinator messages (over the coordinator's IPC channel).
 *
 * The root enqueues work items in the journal (in the same transaction as
 * the stage's start record) and nudges the coordinator with `work_ready`.
 * The coordinator answers every item exactly once in a `work_done` (the
 * stage's result, or a failure such as worker_retry_limit; the items settled
 * in one turn of its event loop share one message), streams live
 * runner events in batches (`work_events`: its workers' batches as they come,
 * about every 250 ms, a stage's `started` at once; the events that come with
 * an item's result ride on its `work_done`, so a short stage costs one
 * message, not two), and
 * acknowledges control revisions once every worker has. A root that has
 * heard nothing of an item for a lease period asks for it (`work_status`):
 * the coordinator answers with what the queue and its workers say, first
 * sending a settled item's `work_done` if it never was.
 */

import * as v from "valibot";
import { byType, ControlSchema, DeliverSchema, RunnerEventSchema, StageResultSchema, WrapUpSchema, HoldSchema } from "./common.ts";

// ---------------------------------------------------------------- root → coordinator

export const ToCoordinatorSchema = byType([
  /**
   * New items are on the queue (the first one also makes the coordinator open the journal). `stages`: how many
   * stages the root now waits for on this pool (queued or running), so the coordinator starts workers up to that
   * many (at most its configured number): a one-stage run starts no second worker.
   */
  v.object({ type: v.literal("work_ready"), stages: v.pipe(v.number(), v.integer(), v.minValue(0)) }),
  /** Stop one stage (cancel, Ctrl-C, failFast): its result comes back as "cancelled". */
  v.object({ type: v.literal("cancel_work"), workId: v.string(), reason: v.string() }),
  /** A message for a running stage. */
  DeliverSchema,
  WrapUpSchema,
  HoldSchema,
  /** Answered by `control_ack` once every worker applied it. */
  ControlSchema,
  /** Where is this item? Answered by `work_status` (after its `work_done`, when it is settled and that was never sent). */
  v.object({ type: v.literal("work_status"), workId: v.string() }),
  /**
   * The root counted the result of a budgeted item (StageRequest.budgeted; `workId`), or its budget ran out
   * while stages ran (no `workId`): claims go on once every committed budgeted result is counted, unless
   * `exhausted` (then no item of this drive is claimed any more).
   */
  v.object({ type: v.literal("budget_counted"), workId: v.optional(v.string()), exhausted: v.boolean() }),
  /** The run is over: stop every worker and exit. */
  v.object({ type: v.literal("shutdown") }),
  /** Worker hosts only: the driver's result of a stage's run tool call (`stage_tool_call`; fleet/tools-relay.ts). */
  v.object({ type: v.literal("stage_tool_result"), callId: v.string(), ok: v.boolean(), output: v.string() }),
  /** The root is stopping (SIGTERM, Ctrl-C): journal statements that lost their connection fail at once, not after the retry window. */
  v.object({ type: v.literal("stop_waiting") }),
]);
export type ToCoordinator = v.InferOutput<typeof ToCoordinatorSchema>;

// ---------------------------------------------------------------- coordinator → root

export const FromCoordinatorSchema = byType([
  v.object({ type: v.literal("ready"), version: v.number(), pid: v.number(), workers: v.number(), logDir: v.string() }),
  /** The first of its workers is up and idle (sent once): a pool started again after a lost one waits for it. */
  v.object({ type: v.literal("worker_up") }),
  v.object({
    type: v.literal("work_events"),
    batch: v.array(v.object({ workId: v.string(), events: v.array(RunnerEventSchema) })),
  }),
  /** Items' results, each with its live events not sent yet (applied before the result). */
  v.object({
    type: v.literal("work_done"),
    items: v.array(v.object({ workId: v.string(), result: StageResultSchema, events: v.optional(v.array(RunnerEventSchema)) })),
  }),
  v.object({ type: v.literal("deliver_result"), workId: v.string(), messageId: v.string(), delivered: v.boolean() }),
  /**
   * running: a worker holds it; queued: it waits for a worker (again); done:
   * settled, its `work_done` sent (just now, or before); gone: no live item (abandoned or
   * unknown): the root fails the stage with worker_lost.
   */
  v.object({ type: v.literal("work_status"), workId: v.string(), state: v.picklist(["running", "queued", "done", "gone"]) }),
  v.object({ type: v.literal("control_ack"), rev: v.number() }),
  /** Worker hosts only: a stage's run tool call for the driver, relayed (fleet/tools-relay.ts); answered by `stage_tool_result`. */
  v.object({ type: v.literal("stage_tool_call"), workId: v.string(), callId: v.string(), token: v.string(), tool: v.string(), args: v.record(v.string(), v.unknown()) }),
  /** The coordinator cannot go on (journal unavailable, ...): every outstanding stage is lost. */
  v.object({ type: v.literal("fatal"), code: v.string(), message: v.string() }),
]);
export type FromCoordinator = v.InferOutput<typeof FromCoordinatorSchema>;

/** How the root configures a coordinator (passed on its command line as JSON). */
export const CoordinatorConfigSchema = v.object({
  version: v.number(),
  rootId: v.string(),
  /** The epoch of the root's lease: the pool claims only the items this drive enqueued, and stops once the lease moved on. */
  rootEpoch: v.pipe(v.number(), v.integer()),
  home: v.string(),
  journalUrl: v.optional(v.string()),
  workers: v.pipe(v.number(), v.integer(), v.minValue(1)),
  leaseMs: v.number(),
  heartbeatMs: v.number(),
  /** How long a retired (unresponsive) worker gets to exit before SIGKILL. */
  retireGraceMs: v.number(),
  maxGenerations: v.number(),
  /** How long a spawned worker gets to say it is ready (config timeouts.workerStartMs). */
  startupTimeoutMs: v.number(),
  logDir: v.string(),
  /** Only items of these queues (a shared journal: worker hosts serve the others); absent: every item of the drive. */
  queues: v.optional(v.array(v.string())),
});
export type CoordinatorConfig = v.InferOutput<typeof CoordinatorConfigSchema>;
