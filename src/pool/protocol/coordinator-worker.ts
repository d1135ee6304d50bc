/**
 * Coordinator ↔ worker messages (over each worker's IPC channel).
 *
 * A worker runs one stage at a time. Every request of the worker that
 * changes state carries an operation id (`opId`): the coordinator applies
 * it once; a retry gets the first answer; a reused id with another body is
 * refused. Every reference to a work item names its generation and epoch,
 * so a replaced (stale) worker can commit nothing: its requests are
 * answered "stale" and change nothing.
 */

import * as v from "valibot";
import { byType, ControlSchema, DeliverSchema, RunnerEventSchema, StageRequestSchema, StageResultSchema, WorkRefSchema, WrapUpSchema, HoldSchema } from "./common.ts";

// ---------------------------------------------------------------- coordinator → worker

/** The answer to a worker request with an operation id. */
const ReceiptSchema = v.object({ opId: v.string(), status: v.picklist(["committed", "stale", "op_conflict"]) });
export type Receipt = v.InferOutput<typeof ReceiptSchema>;

export const ToWorkerSchema = byType([
  v.object({
    type: v.literal("start"),
    workId: v.string(),
    generation: v.number(),
    epoch: v.number(),
    request: StageRequestSchema,
    /** The receipt of the worker's previous `complete`, when this item was claimed in the same transaction (one message, not two). */
    receipt: v.optional(ReceiptSchema),
  }),
  v.object({ type: v.literal("cancel"), workId: v.string(), reason: v.string() }),
  DeliverSchema,
  WrapUpSchema,
  HoldSchema,
  v.object({ type: v.literal("ping"), nonce: v.number() }),
  ControlSchema,
  /** The answer to a request with an operation id. */
  v.object({ type: v.literal("receipt"), ...ReceiptSchema.entries }),
  v.object({ type: v.literal("shutdown") }),
]);
export type ToWorker = v.InferOutput<typeof ToWorkerSchema>;

// ---------------------------------------------------------------- worker → coordinator

export const FromWorkerSchema = byType([
  v.object({ type: v.literal("ready"), version: v.number(), workerId: v.string(), pid: v.number() }),
  v.object({ type: v.literal("heartbeat"), opId: v.string(), refs: v.array(WorkRefSchema) }),
  /**
   * Live events of the stage, batched. `pgid`: on the batch that reports the stage's start (its `started` event),
   * the stage's process group (killed if this worker is lost).
   */
  v.object({ type: v.literal("events"), ref: WorkRefSchema, events: v.array(RunnerEventSchema), pgid: v.optional(v.number()) }),
  /**
   * The stage's result. `events`: its live events not sent yet (a stage that ended within STARTED_REPORT_MS sends its
   * `started` here, not in an `events` message of its own); on the first try only, so a retry repeats none.
   */
  v.object({ type: v.literal("complete"), opId: v.string(), ref: WorkRefSchema, result: StageResultSchema, events: v.optional(v.array(RunnerEventSchema)) }),
  /** The answer to a ping: `holds` is the item the worker runs or is committing (null: none); one the coordinator does not expect loses the slot. */
  v.object({ type: v.literal("pong"), nonce: v.number(), holds: v.nullable(WorkRefSchema) }),
  /** The worker could not send its result for `ref` (not a missing receipt: those it retries); the coordinator gives the item back. */
  v.object({ type: v.literal("commit_failed"), ref: WorkRefSchema, message: v.string() }),
  v.object({ type: v.literal("control_ack"), rev: v.number() }),
  v.object({ type: v.literal("deliver_result"), workId: v.string(), messageId: v.string(), delivered: v.boolean() }),
]);
export type FromWorker = v.InferOutput<typeof FromWorkerSchema>;
