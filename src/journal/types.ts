/**
 * The journal: the source of truth for every run.
 *
 * A journal stores, per run, an append-only, gapless event sequence
 * (seq 1..n) plus a `runs` row that is a projection of those events
 * (status, outputs, last seq), updated in the same transaction as the
 * event that changes it. Leases decide which process may write a run tree
 * (a root run and all its child runs): every append names the writer's
 * lease, and the backend checks holder and epoch inside the same
 * transaction, refusing the whole batch if the lease was lost.
 *
 * This file is the whole contract. A backend (sqlite/, later postgres/) is
 * a folder implementing `Journal`; the conformance suite in
 * test/conformance runs against every backend. Nothing outside journal/
 * may depend on which backend it talks to: behaviour differences are
 * expressed as `JournalCapabilities`.
 */

import type { ErrorInfo } from "../shared/errors.ts";
import type { HolderId, RunId } from "../shared/ids.ts";
import type { ProcessIdentity } from "../shared/process-info.ts";

export const RUN_STATUSES = [
  "running",
  "completed",
  "failed",
  "cancelled",
  "blocked",
  "interrupted",
] as const;
/** Stored status. "crashed" is derived on read: running + lease expired or holder dead. */
export type RunStatus = (typeof RUN_STATUSES)[number];
export type ShownStatus = RunStatus | "crashed" | "paused";

export const TERMINAL_STATUSES: readonly RunStatus[] = ["completed", "cancelled"];

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

export interface AppendEntry {
  runId: RunId;
  type: string;
  key?: string | null;
  payload: unknown;
  /** A second append with the same key in the same run returns the first entry ("exists"). */
  idempotencyKey?: string | null;
  /** Compare-and-set: append only if the run's last seq equals this. */
  expectedSeq?: number;
  /** Present only on a run's first event: creates the runs row (refused if it exists). */
  newRun?: NewRunFields;
  patch?: RunPatch;
  /** A stage execution to put on the work queue in the same transaction (run and root from the entry). */
  work?: NewWorkItem;
  /** Defaults to Date.now() at append. */
  at?: number;
}

export type AppendOutcome =
  | { status: "appended"; seq: number }
  | { status: "exists"; seq: number; event: JournalEvent }
  | { status: "conflict"; lastSeq: number; expectedSeq: number }
  | { status: "error"; error: ErrorInfo };

export interface AcquireOptions {
  timeoutMs: number;
  /** Take the lease even from a live holder (used only by tests and `cancel --force`). */
  force?: boolean;
}

export interface ListRunsFilter {
  status?: RunStatus;
  /** Root runs only (default true). */
  rootsOnly?: boolean;
  parentId?: RunId;
  limit?: number;
  offset?: number;
}

export interface JournalCapabilities {
  /** One writer at a time for the whole database (SQLite): group commit pays off most. */
  singleWriter: boolean;
  /** Work-queue claims may use FOR UPDATE SKIP LOCKED. */
  supportsSkipLocked: boolean;
}

export type Durability = "full" | "normal";

export interface Journal {
  readonly capabilities: JournalCapabilities;
  /** Human description of where the journal lives (path or redacted URL). */
  readonly location: string;

  /**
   * Take the lease on a root run: created if absent; taken over (epoch + 1)
   * if expired, released, or held by a process of this host that no longer
   * exists. A live or remote unexpired holder: throws LeaseHeldError.
   */
  acquireLease(rootId: RunId, holder: HolderInfo, opts: AcquireOptions): Promise<Lease>;
  /** Extend the lease; throws LeaseLostError if holder/epoch no longer match. */
  renewLease(lease: Lease): Promise<Lease>;
  /** Give the lease up (a later acquire takes it at once). Fenced; a lost lease is ignored. */
  releaseLease(lease: Lease): Promise<void>;
  getLease(rootId: RunId): Promise<Lease | undefined>;

  /**
   * Append entries in one transaction: the lease is checked first (throws
   * LeaseLostError and writes nothing if lost), then each entry runs inside
   * its own savepoint so one bad entry yields an "error" outcome without
   * sinking the others. Outcomes are in entry order.
   */
  append(lease: Lease, entries: AppendEntry[]): Promise<AppendOutcome[]>;

  getRun(id: RunId): Promise<RunRecord | undefined>;
  /** Runs whose id starts with `prefix` (at most `limit`), newest first. */
  findRuns(prefix: string, limit: number): Promise<RunRecord[]>;
  listRuns(filter?: ListRunsFilter): Promise<RunRecord[]>;
  countRuns(filter?: ListRunsFilter): Promise<number>;
  /** Events with seq > afterSeq, ascending, at most `limit` (default: all). */
  readEvents(runId: RunId, afterSeq?: number, limit?: number): Promise<JournalEvent[]>;

  /**
   * Ask the process driving a run to do something ("cancel", "pause",
   * "unpause"): unfenced, bumps controlRev and returns the new revision.
   * The driver sees it on its next poll and records `controlAck` once it
   * (and every worker) applied it.
   */
  requestControl(runId: RunId, action: string): Promise<number>;

  /** The work queue of stage executions (SYSTEM.md section 6), in the same database. */
  readonly work: WorkQueue;

  close(): Promise<void>;
}

// ---------------------------------------------------------------- work queue

/**
 * Work item states:
 * - ready: waiting for a worker (FIFO by readyAt);
 * - leased: a worker holds it under (workerId, generation, epoch) until leaseExpiresAt;
 * - completed / failed: a worker committed its outcome (final);
 * - abandoned: the driver that enqueued it is gone (a resumed run enqueues anew).
 * A leased item whose worker is lost goes back to ready with generation + 1,
 * or to failed (worker_retry_limit) once the generations are used up.
 */
export const WORK_STATES = ["ready", "leased", "completed", "failed", "abandoned"] as const;
export type WorkState = (typeof WORK_STATES)[number];

export interface NewWorkItem {
  id: string;
  stageKey: string;
  attempt: number;
  /** The stage request: plain data a worker can run. */
  descriptor: unknown;
}

export interface WorkItem extends NewWorkItem {
  rootId: RunId;
  runId: RunId;
  state: WorkState;
  generation: number;
  workerId: string | null;
  epoch: number;
  leaseExpiresAt: number | null;
  readyAt: number;
  createdAt: number;
  updatedAt: number;
  result: unknown;
  error: ErrorInfo | null;
}

/** Whose an item is: every change to a leased item names all four. */
export interface WorkFence {
  id: string;
  workerId: string;
  generation: number;
  epoch: number;
}

export type WorkReceipt =
  | { status: "committed"; item: WorkItem }
  /** The fence no longer holds (the item moved on to another generation, epoch or state). */
  | { status: "stale"; item: WorkItem | undefined }
  /** The operation id was used before with another body. */
  | { status: "op_conflict" };

export interface WorkQueue {
  /** Lease the oldest ready item (of `rootId`, or any root) to `workerId`: epoch + 1. */
  claim(workerId: string, leaseMs: number, rootId?: RunId): Promise<WorkItem | undefined>;
  /** Heartbeats: extend every lease that still holds, in one transaction; returns the fences that no longer hold. */
  renew(fences: readonly WorkFence[], leaseMs: number): Promise<WorkFence[]>;
  /**
   * Commit a worker's outcome for a leased item (fenced). `op` makes it
   * idempotent: the same op id and digest returns the first receipt; the
   * same id with another digest is refused.
   */
  complete(
    fence: WorkFence,
    outcome: { state: "completed" | "failed"; result?: unknown; error?: ErrorInfo },
    op: { id: string; digest: string },
  ): Promise<WorkReceipt>;
  /** A lost worker's item: back to ready at generation + 1, or failed with `error` when that would exceed `maxGenerations`. */
  release(fence: WorkFence, maxGenerations: number, error: ErrorInfo): Promise<WorkReceipt>;
  get(id: string): Promise<WorkItem | undefined>;
  list(rootId: RunId): Promise<WorkItem[]>;
  /** Ready or leased items of a root whose driver is gone: abandoned. Returns how many. */
  abandon(rootId: RunId): Promise<number>;
  count(state?: WorkState): Promise<number>;
}
