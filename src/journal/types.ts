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
  /** Pending control request from another process ("cancel"), and its revision. */
  control: string | null;
  controlRev: number;
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
   * Ask the process driving a run to do something ("cancel"): unfenced,
   * bumps controlRev. The driver sees it on its next poll and acknowledges
   * with a `clearControl` patch.
   */
  requestControl(runId: RunId, action: string): Promise<void>;

  close(): Promise<void>;
}
