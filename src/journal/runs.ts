/**
 * Runs, their events and their leases: the records at the bottom of the
 * journal contract (./journal.ts).
 *
 * A journal stores, per run, an append-only, gapless event sequence
 * (seq 1..n) plus a `runs` row that is a projection of those events
 * (status, outputs, last seq), updated in the same transaction as the
 * event that changes it. Leases decide which process may write a run tree
 * (a root run and all its child runs): every append names the writer's
 * lease, and the backend checks holder and epoch inside the same
 * transaction, refusing the whole batch if the lease was lost.
 */

import type { ErrorInfo } from "../shared/errors.ts";
import type { HolderId, RunId } from "../shared/ids.ts";
import type { ProcessIdentity } from "../shared/process-info.ts";
import type { StartOrigin } from "./run-origin.ts";

export const RUN_STATUSES = [
  "running",
  "completed",
  "failed",
  "cancelled",
  "blocked",
  "interrupted",
  "awaiting_input",
  "skipped",
] as const;
/**
 * Stored status. "crashed" is derived on read: running (or awaiting_input)
 * + lease expired or holder dead. "awaiting_input": a ctx.ask waits for an
 * answer (driven or parked; resumable, and a resumed run waits again).
 * "skipped": the workflow decided there was nothing to do (ctx.exit), ended
 * like "completed"; "blocked" (a budget, or ctx.exit) is resumable.
 * "continued" is derived too: completed with the error code CONTINUED_CODE
 * (ctx.continueAsNew; the next run of its chain goes on).
 */
export type RunStatus = (typeof RUN_STATUSES)[number];
export type ShownStatus = RunStatus | "crashed" | "paused" | "continued";

/** The error code of a run that ended by continuing as a new run (ctx.continueAsNew): stored completed, shown `continued`. */
export const CONTINUED_CODE = "continued_as_new";

export const TERMINAL_STATUSES: readonly RunStatus[] = ["completed", "cancelled", "skipped"];

export interface RunRecord {
  id: RunId;
  rootId: RunId;
  parentId: RunId | null;
  /** Replay position of the boundary step in the parent that started this child. */
  parentKey: string | null;
  depth: number;
  workflowName: string;
  workflowPath: string;
  workflowDigest: string;
  inputs: unknown;
  status: RunStatus;
  outputs: unknown;
  error: ErrorInfo | null;
  createdAt: number;
  updatedAt: number;
  endedAt: number | null;
  lastSeq: number;
  /** Pending control request from another process ("cancel", "pause", "unpause"), and its revision. */
  control: string | null;
  controlRev: number;
  /** The highest control revision the run's driver has applied (and every worker acknowledged). */
  controlAck: number;
  /** How the run was started (./run-origin.ts), null when nothing recorded says; set by the journal from its run_started. */
  origin: StartOrigin | null;
  /** The service recovered the run at least once (./run-origin.ts); set by the journal from its run_resumed events. */
  recovered: boolean;
}

export interface JournalEvent {
  runId: RunId;
  seq: number;
  type: string;
  /** Replay position of the step this event belongs to, if any. */
  key: string | null;
  idempotencyKey: string | null;
  payload: unknown;
  at: number;
}

/** Who holds a lease: a process on a host. */
export interface HolderInfo extends ProcessIdentity {
  holderId: HolderId;
}

export interface Lease extends HolderInfo {
  /** The root run this lease covers (with all its child runs). */
  rootId: RunId;
  epoch: number;
  renewedAt: number;
  timeoutMs: number;
  /**
   * The journal's clock when this lease was read, where the journal has a clock of its own (Postgres: the
   * database's, the one that judges expiry there); expiry is judged against it instead of this host's
   * wall clock (run-status.ts).
   */
  readAt?: number;
}

/** What a new run's first event carries: the runs row is created from it. */
export interface NewRunFields {
  rootId: RunId;
  parentId: RunId | null;
  parentKey: string | null;
  depth: number;
  workflowName: string;
  workflowPath: string;
  workflowDigest: string;
  inputs: unknown;
}

/** Changes to the runs projection made together with an event. */
export interface RunPatch {
  status?: RunStatus;
  outputs?: unknown;
  error?: ErrorInfo | null;
  endedAt?: number | null;
  /** Clear a pending control request (the root acknowledged it). */
  clearControl?: boolean;
  workflowDigest?: string;
  /** The driver applied control revision n (see RunRecord.controlAck). */
  controlAck?: number;
}
