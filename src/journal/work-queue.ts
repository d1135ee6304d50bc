/**
 * The work queue of stage executions (`Journal.work`), in the journal's own
 * database: a root's stage step enqueues an item in the same commit as the
 * attempt's start record (./append.ts); pool workers (src/pool/) and worker
 * hosts (src/fleet/) claim, renew and complete items, each change fenced by
 * whose the item is.
 *
 * Work item states:
 * - ready: waiting for a worker (FIFO by readyAt);
 * - leased: a worker holds it under (workerId, generation, epoch) until leaseExpiresAt;
 * - completed / failed: a worker committed its outcome (final);
 * - abandoned: the driver that enqueued it is gone (a resumed run enqueues anew).
 * A leased item whose worker is lost goes back to ready with generation + 1,
 * or to failed (worker_retry_limit) once the generations are used up.
 */

import type { ErrorInfo } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import type { Lease } from "./runs.ts";

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
  /** The epoch of the root's lease under which the item was enqueued: only that drive's pool may claim it. */
  rootEpoch: number;
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

/**
 * Whose items a claim may take: those a root enqueued under its lease at
 * `epoch`, and only while that lease is still at that epoch (not released,
 * not taken over). A pool left over from an earlier drive of the root claims
 * nothing of the drive that took over.
 */
export interface ClaimScope {
  rootId: RunId;
  epoch: number;
  /** Only items of these queues (where the journal has a `fleet`: hosts serve the others); else every item of the drive. */
  queues?: readonly string[];
}

/** Whose items a claim may take: one drive's (ClaimScope) or, for a worker host, any root's of some queues (./fleet.ts). */
/** A host's claims: any root's items of these queues, enqueued by a root that speaks this pool protocol (./fleet.ts). */
export interface HostClaimScope {
  queues: readonly string[];
  protocol: number;
}

export type ClaimFilter = ClaimScope | HostClaimScope;

export function isHostScope(scope: ClaimFilter | undefined): scope is HostClaimScope {
  return scope !== undefined && !("rootId" in scope);
}

/** What `release` answers. */
export type WorkReceipt =
  | { status: "committed"; item: WorkItem }
  /** The fence no longer holds (the item moved on to another generation, epoch or state). */
  | { status: "stale"; item: WorkItem | undefined }
  /** The operation id was used before with another body. */
  | { status: "op_conflict" };

/**
 * What a commit of a worker's outcome answers. A committed one names no
 * item: nobody needs it (the committer has the outcome), and reading it
 * back is a good part of the commit's cost (`get` reads it when wanted).
 */
export type CompletionReceipt = { status: "committed" } | Exclude<WorkReceipt, { status: "committed" }>;

/** What a commit of a worker's outcome answers: its receipt, and the worker's next item when one was claimed with it. */
export type WorkCommitted = { receipt: CompletionReceipt; next: WorkItem | undefined };

/** One worker's outcome for `completeMany`. */
export interface WorkCommit {
  fence: WorkFence;
  outcome: { state: "completed" | "failed"; result?: unknown; error?: ErrorInfo };
  op: { id: string; digest: string };
  claimNext?: { leaseMs: number; root?: ClaimFilter };
}

export interface WorkQueue {
  /**
   * Lease the oldest ready item (of `root`, or any root) to `workerId`:
   * epoch + 1. An item whose root's lease is stale (moved past the epoch it
   * was enqueued under, released, or expired) is never leased: without
   * `root` the claim abandons it and takes the next.
   */
  claim(workerId: string, leaseMs: number, root?: ClaimFilter): Promise<WorkItem | undefined>;
  /**
   * `claim` for several idle workers in one transaction: the oldest ready
   * item to `workerIds[0]`, the next to `workerIds[1]`, ... (FIFO); fewer
   * items than workers when fewer are ready.
   */
  claimMany(workerIds: readonly string[], leaseMs: number, root?: ClaimFilter): Promise<WorkItem[]>;
  /** Lease one given item to `workerId` if it is ready (queue order aside); undefined when it is not. */
  claimItem(id: string, workerId: string, leaseMs: number): Promise<WorkItem | undefined>;
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
  ): Promise<CompletionReceipt>;
  /**
   * `complete`, and in the same transaction, when that was a first commit
   * (not a stale or conflicting one, nor a retry answered with its first
   * receipt), `claim` the oldest ready item (of `claimNext.root`, or any
   * root) for the same worker: its next item, without a second transaction.
   */
  completeAndClaim(
    fence: WorkFence,
    outcome: { state: "completed" | "failed"; result?: unknown; error?: ErrorInfo },
    op: { id: string; digest: string },
    claimNext: { leaseMs: number; root?: ClaimFilter },
  ): Promise<WorkCommitted>;
  /**
   * Several workers' outcomes, in order: each as `completeAndClaim` when it
   * names `claimNext`, else as `complete`. Where the backend's transactions
   * are synchronous (SQLite) they share one transaction (a coordinator that
   * hears from several workers in one turn commits once); elsewhere each is
   * its own call. Every outcome is committed or refused as it would be alone.
   */
  completeMany(commits: readonly WorkCommit[]): Promise<WorkCommitted[]>;
  /** A lost worker's item: back to ready at generation + 1, or failed with `error` when that would exceed `maxGenerations`. */
  release(fence: WorkFence, maxGenerations: number, error: ErrorInfo): Promise<WorkReceipt>;
  get(id: string): Promise<WorkItem | undefined>;
  list(rootId: RunId): Promise<WorkItem[]>;
  /**
   * The ready or leased items that earlier drives of `lease`'s root enqueued
   * (a lower root epoch): abandoned. Fenced by the lease: a holder that lost
   * it gets LeaseLostError and changes nothing. Returns how many.
   */
  abandon(lease: Lease): Promise<number>;
  count(state?: WorkState): Promise<number>;
}

