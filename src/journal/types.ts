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

import type { ErrorInfo, StorageError } from "../shared/errors.ts";
import type { HolderId, RunId } from "../shared/ids.ts";
import type { ProcessIdentity } from "../shared/process-info.ts";
import type { ScheduleStore } from "./schedules.ts";
import type { FleetStore, HostClaimScope } from "./fleet.ts";
import type { ArtifactStore } from "../artifacts/store.ts";

export const RUN_STATUSES = [
  "running",
  "completed",
  "failed",
  "cancelled",
  "blocked",
  "interrupted",
  "awaiting_input",
] as const;
/**
 * Stored status. "crashed" is derived on read: running (or awaiting_input)
 * + lease expired or holder dead. "awaiting_input": a ctx.ask waits for an
 * answer (driven or parked; resumable, and a resumed run waits again).
 */
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
  /**
   * False for entries that only record progress (a stage attempt started):
   * a batch of such entries is committed without waiting for the disk, so a
   * power loss (never a process crash) may lose it. Default true.
   */
  durable?: boolean;
  /** A stage execution to put on the work queue in the same transaction (run and root from the entry). */
  work?: NewWorkItem;
  /**
   * A work item of this run the entry gives up on (a pooled stage attempt recorded as failed): abandoned in
   * the same transaction if it is still ready or leased, so no later pool of this drive runs it (a fresh pool
   * after a lost one claims every ready item of the drive).
   */
  abandonWork?: string;
  /** Record a stage (or child boundary) of this run in the stage index, in the same transaction. */
  stage?: StageIndexEntry;
  /** Open a prompt (ctx.ask) in the same transaction. */
  prompt?: NewPrompt;
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
  /** Any of these stored statuses (with `status`, both must hold). */
  statuses?: readonly RunStatus[];
  /** Runs of the workflow of this name. */
  workflowName?: string;
  /** Runs created at or after this time (ms since the epoch). */
  createdSince?: number;
  /** Root runs only (default true). */
  rootsOnly?: boolean;
  parentId?: RunId;
  limit?: number;
  offset?: number;
}

/**
 * What callers may rely on beyond the interface, per backend. Each flag is
 * here because code outside journal/ reads it (named below); a backend
 * sets what it can promise, and the conformance suite checks each
 * backend's promise, not one backend's values.
 */
export interface JournalCapabilities {
  /**
   * A write transaction runs from BEGIN to COMMIT without yielding to the
   * event loop (SQLite here: synchronous statements; waits for another
   * process's lock happen before BEGIN). Then `claimMany`'s `onLeased` runs
   * while nothing else of the process can, and the pool's dispatcher
   * (src/pool/dispatcher.ts) starts a worker before its claim commits. A
   * backend that awaits inside a transaction (a network database) says
   * false, and the dispatcher starts workers after the commit.
   */
  synchronousTransactions: boolean;
}

export type Durability = "full" | "normal";

export interface Journal {
  readonly capabilities: JournalCapabilities;
  /** Human description of where the journal lives (path or redacted URL). */
  readonly location: string;
  /**
   * Throws the backend's storage_readonly refusal when this journal was
   * opened read-only (a home this process may read but not write), so a
   * command that will change runs says why before it does anything else.
   * Optional: a backend that is never opened read-only has none.
   */
  assertWritable?(): void;

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

  /** The work queue of stage executions (docs/design/pool.md), in the same database. */
  readonly work: WorkQueue;

  /** Reads for the status server whose cost follows what changed, not the history (below). */
  readonly views: JournalViews;

  /** Messages to stages and prompts to humans (docs/design/intercom.md), in the same database. */
  readonly messages: MessageStore;

  /** Deleting finished runs and giving their space back (`atomic gc`, the service's retention). */
  readonly retention: RunRetention;
  /** Schedules (`atomic schedule`, the service's scheduler): the contract is ./schedules.ts. */
  readonly schedules: ScheduleStore;
  /** Worker hosts (./fleet.ts): only on a journal that several machines share. */
  readonly fleet?: FleetStore;

  /**
   * An artifact store in the journal's own database that every host of it
   * can read (../artifacts/store.ts), for backends shared between hosts;
   * absent on the embedded journal (the local files are the store).
   */
  artifactStore?(opts: { maxFileBytes: number }): ArtifactStore;

  /**
   * Whether the storage is still the one this process opened: a
   * `storage_unavailable` error to stop with when it is not (the embedded
   * journal's file was deleted or replaced: writes would go to a file
   * nobody reads); undefined while it is. Cheap (a stat): called before a
   * run reports how it ended and periodically while it runs.
   */
  storageFault(): StorageError | undefined;

  close(): Promise<void>;
}

// ---------------------------------------------------------------- retention

/**
 * Retention (`atomic gc`): the journal's side of deleting runs. Which runs
 * may go is the caller's decision (engine/retention.ts), made again inside
 * the deleting transaction from the rows as they are then, so a run that a
 * resume took over since it was listed is kept. A run goes with its whole
 * tree (the root and every child run) and every row that refers to one of
 * them: events, the lease, work items and their operations, the stage
 * index, messages, deliveries, prompts. Each tree is deleted in a
 * transaction of its own: a live run beside a gc waits for at most one.
 */
export interface RunRetention {
  /**
   * Root runs with a stored status in `statuses` whose last change (their
   * end, else their last update) is before `before`, by id, after `afterId`,
   * at most `limit`.
   */
  candidates(filter: { statuses: readonly RunStatus[]; before: number; afterId?: RunId; limit: number }): Promise<RunRecord[]>;
  /**
   * Deletes the root run `rootId` with its tree, in one transaction, if
   * `decide(root, lease)` (the root's row and unreleased lease as read in
   * that transaction) says so. With `dryRun` the transaction is rolled back
   * after the deletes, so the counts are those a real run would report.
   * Undefined when the run does not exist or `decide` kept it.
   */
  deleteTree(
    rootId: RunId,
    decide: (root: RunRecord, lease: Lease | undefined) => boolean,
    opts?: { dryRun?: boolean },
  ): Promise<DeletedTree | undefined>;
  /**
   * Gives the storage's free space back to the file system (SQLite:
   * incremental vacuum). `rewrite` allows a rewrite of the whole store that
   * blocks writers while it runs (SQLite: the VACUUM that turns incremental
   * vacuum on in a file made without it); without it such a store keeps its
   * free pages for later writes, and `note` says so.
   */
  reclaim(opts: { rewrite: boolean }): Promise<ReclaimReport>;
}

export interface DeletedTree {
  /** The runs deleted: the root first, then its child runs. */
  runIds: RunId[];
  /** Rows deleted, by table (tables with none left out). */
  rows: Record<string, number>;
}

export interface ReclaimReport {
  /** The storage's size on disk before and after (SQLite: the database file and its write-ahead log). */
  bytesBefore: number;
  bytesAfter: number;
  /** What the sizes are of, for people: "journal file" when absent; Postgres: the journal's tables. */
  measured?: string;
  /** Why space was not given back, when it was not. */
  note?: string;
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
   *
   * `onLeased(item, index)` is called with each item as soon as its lease
   * is decided, inside the transaction, before the lease is written and
   * committed, so the caller can hand the item out meanwhile (only where
   * `capabilities.synchronousTransactions` says nothing else of the
   * process runs before the commit). If the call
   * then rejects, none of its leases exist: the caller must take back what
   * it handed out (an item given to a worker then is held by no lease).
   */
  claimMany(
    workerIds: readonly string[],
    leaseMs: number,
    root?: ClaimFilter,
    onLeased?: (item: WorkItem, index: number) => void,
  ): Promise<WorkItem[]>;
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

// ---------------------------------------------------------------- messages and prompts

/**
 * The durable side of intercom (docs/design/intercom.md).
 *
 * Stage index: every stage (and child workflow boundary) a driver started,
 * by root run and path ("review/security"): what senders resolve addresses
 * against without reading a run's history. States: running (an attempt
 * started), failed (the last attempt failed; it may run again), finished
 * (checkpointed: it never runs again).
 *
 * Messages: one row per sent message (id unique per root run, with a digest
 * of what was sent so a reused id with other content is refused). A
 * message has one delivery per stage it goes to; a delivery moves
 *   queued → delivered | undeliverable (with a reason)
 * and never back. A queued delivery is either bound to a stage that has
 * started (run id + stage key) or waits for the first stage with its path
 * to start. A sticky message also reaches every stage that starts later and
 * matches its pattern (its deliveries are made when those stages start).
 * At most MAX_QUEUED_PER_STAGE queued deliveries per stage path.
 *
 * Writers: senders (any process) enqueue and answer prompts without a
 * lease; everything the run's driver does (claiming at stage start,
 * settling live deliveries, closing prompts) is fenced by its lease and
 * journaled as events of the run in the same transaction.
 *
 * Prompts (ctx.ask): open → answered | timed_out. Opened by the driver
 * (with the ask's start record); answered by anyone.
 */

export const MAX_QUEUED_PER_STAGE = 50;
export const MAX_STICKY_PER_RUN = 50;
/** Longest message text or answer, in UTF-16 code units. */
export const MAX_MESSAGE_TEXT = 64 * 1024;

export const MESSAGE_MODES = ["steer", "followUp", "interrupt"] as const;
export type MessageMode = (typeof MESSAGE_MODES)[number];

export const STAGE_STATES = ["queued", "running", "failed", "finished"] as const;
export type StageState = (typeof STAGE_STATES)[number];

export interface StageIndexEntry {
  /** The step's replay position in its run. */
  key: string;
  /** Names from the root run down ("review/security"). */
  path: string;
  name: string;
  kind: "stage" | "child";
  state: StageState;
  attempt: number;
  childRunId?: string;
  /** With state "finished": how the stage's recorded result ended (a failureMode "return" stage may finish failed). */
  outcome?: "completed" | "failed";
  /** Usage this record adds to the stage's sum (an attempt's usage, once: with its failure, checkpoint or cancellation). */
  usage?: StageUsage;
}

/** The summable fields of a stage's usage (integers; cost in micro-dollars). */
export interface StageUsage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  costMicroUsd: number;
  turns: number;
}

export interface StageRow extends StageIndexEntry {
  rootId: RunId;
  runId: RunId;
  updatedAt: number;
}

export const DELIVERY_STATES = ["queued", "delivered", "undeliverable"] as const;
export type DeliveryState = (typeof DELIVERY_STATES)[number];

export interface MessageRecord {
  rootId: RunId;
  id: string;
  /** The stage path or pattern it was sent to. */
  target: string;
  text: string;
  mode: MessageMode;
  sticky: boolean;
  /** Who sent it ("cli", "status-page", "<run id>:<stage path>", ...). */
  sender: string;
  createdAt: number;
}

export interface DeliveryRecord {
  /** Increases with every delivery made: the order a stage receives its messages in. */
  seq: number;
  rootId: RunId;
  messageId: string;
  stagePath: string;
  /** Set once bound to a started stage. */
  runId: RunId | null;
  stageKey: string | null;
  state: DeliveryState;
  /** The stage attempt it was delivered to. */
  attempt: number | null;
  reason: string | null;
  createdAt: number;
  settledAt: number | null;
}

/** A message as a stage receives it. */
export interface StageMail {
  deliverySeq: number;
  messageId: string;
  text: string;
  mode: MessageMode;
  sender: string;
  /** Delivered by this claim (false: delivered to an earlier attempt of the stage, handed again to a fresh one). */
  fresh: boolean;
}

/** A queued delivery bound to a started stage, with what to deliver. */
export interface LiveDelivery extends DeliveryRecord {
  runId: RunId;
  stageKey: string;
  text: string;
  mode: MessageMode;
  sender: string;
}

export interface StageAttempt {
  runId: RunId;
  stageKey: string;
  path: string;
  name: string;
  attempt: number;
}

export interface NewMessage {
  rootId: RunId;
  id: string;
  target: string;
  text: string;
  mode: MessageMode;
  sticky: boolean;
  sender: string;
  /** Which stage rows the planner is shown: these exact paths, and every stage whose path starts with `prefix`. */
  lookup: { paths?: string[]; prefix?: string };
}

/** Where one message goes: a started stage (run + key) or the next stage to start with this path. */
export interface PlannedDelivery {
  stagePath: string;
  runId?: RunId;
  stageKey?: string;
}

/**
 * Decides a message's deliveries from the root run and the stage rows
 * `lookup` selected, read in the enqueue transaction (so no stage can start
 * in between). Throws (an AtomicError) to refuse the message.
 */
export type MessagePlanner = (seen: { root: RunRecord | undefined; stages: StageRow[] }) => PlannedDelivery[];

export interface EnqueueResult {
  /** "exists": a message with this id and the same content was sent before (nothing new written). */
  status: "queued" | "exists";
  message: MessageRecord;
  deliveries: DeliveryRecord[];
}

export type PromptState = "open" | "answered" | "timed_out";

export interface NewPrompt {
  id: string;
  question: string;
  choices: string[] | null;
  /** When an unanswered prompt times out (ms since the epoch), if it does. */
  deadline: number | null;
}

export interface PromptRecord extends NewPrompt {
  rootId: RunId;
  runId: RunId;
  stageKey: string;
  state: PromptState;
  answer: string | null;
  answeredBy: string | null;
  createdAt: number;
  answeredAt: number | null;
}

// ---------------------------------------------------------------- views for the status server

/**
 * Stage tallies: the stage index (kind "stage" rows) of root runs' trees,
 * grouped by root, by the stored status of the run each stage belongs to (a
 * root or a child), by state and outcome; with usage summed. One indexed
 * read per page of the run list, whatever the runs' histories hold.
 *
 * Run changes: every change of a runs row (created, an event appended, a
 * patch) gives it a new change number, increasing across the whole journal
 * in commit order, so a reader that remembers the last number it saw reads
 * only the runs that changed since (`/metrics`). A backend must keep that
 * order (SQLite: one writer at a time; a concurrent backend needs a
 * commit-ordered counter). A run deleted by retention is a change too
 * (`deleted`), numbered after every earlier change, and the numbers never
 * go back when the run that held the highest one is gone.
 */
export interface JournalViews {
  stageTallies(rootIds: readonly RunId[]): Promise<StageTally[]>;
  /**
   * Runs created, patched (status, outputs, error, end, control acknowledged)
   * or deleted after `afterChange`, in change order, at most `limit`. An
   * append without a patch is not a change: it moves the run's `lastSeq`
   * without a new change number, so a reader that follows a run's events
   * (status/metrics.ts) looks at the runs it knows to be open itself. That
   * keeps every step from rewriting the change index (on Postgres it keeps
   * the run row's update HOT and off the shared change clock).
   */
  changesSince(afterChange: number, limit: number): Promise<RunChange[]>;
}

export interface StageTally {
  rootId: RunId;
  /** Stored status of the run these stages belong to. */
  runStatus: RunStatus;
  state: StageState;
  outcome: "completed" | "failed" | null;
  stages: number;
  /** Summed over the group; null when no stage of it recorded usage. */
  usage: StageUsage | null;
}

export interface RunChange {
  /** The run was deleted (retention): `status` and `lastSeq` are its last ones. */
  deleted?: boolean;
  id: RunId;
  rootId: RunId;
  parentId: RunId | null;
  status: RunStatus;
  lastSeq: number;
  change: number;
}

export interface MessageStore {
  // ---- senders (no lease)
  /**
   * Records a message and its deliveries in one transaction: a message id
   * seen before with the same content returns "exists"; with other content
   * it is refused (message_id_conflict); a stage path that would hold more
   * than MAX_QUEUED_PER_STAGE queued deliveries is refused (queue_full); a
   * sticky message beyond MAX_STICKY_PER_RUN is refused (sticky_limit).
   */
  enqueue(message: NewMessage, plan: MessagePlanner): Promise<EnqueueResult>;
  /** Answers an open prompt; the same answer again returns "exists"; anything else on a closed prompt is refused. */
  answerPrompt(rootId: RunId, promptId: string, answer: string, by: string): Promise<{ status: "answered" | "exists"; prompt: PromptRecord }>;

  // ---- the run's driver (fenced by its lease)
  /**
   * A stage attempt is about to start: records it running in the stage
   * index, binds and delivers its queued messages (by path or bound to
   * it), makes and delivers the deliveries of matching sticky messages, and
   * appends `event(fresh)` when anything was delivered — one transaction.
   * Returns every message delivered to this stage so far, in delivery order
   * (a fresh attempt receives its predecessors' messages too).
   */
  claimForStage(
    lease: Lease,
    stage: StageAttempt,
    matches: (pattern: string) => boolean,
    event: (fresh: StageMail[]) => AppendEntry | undefined,
  ): Promise<StageMail[]>;
  /**
   * A stage attempt already started (its start record committed) without a
   * claim: binds queued messages for its path, and matching sticky ones, to
   * it as queued deliveries (delivered live). Returns how many.
   */
  bindForStage(lease: Lease, stage: StageAttempt, matches: (pattern: string) => boolean): Promise<number>;
  /**
   * Settles queued deliveries (only those still queued change) and appends
   * `events`, in one transaction. Returns the seqs that changed.
   */
  settle(
    lease: Lease,
    changes: { seq: number; state: "delivered" | "undeliverable"; attempt?: number; reason?: string }[],
    events: (changed: number[]) => AppendEntry[],
  ): Promise<number[]>;
  /** Every queued delivery of the root (under `pathPrefix` if given) becomes undeliverable with `reason`. Returns how many. */
  settleAll(lease: Lease, rootId: RunId, reason: string, pathPrefix?: string): Promise<number>;
  /** Closes an open prompt as timed out; returns the prompt as it is after (answered, if an answer won the race). */
  timeOutPrompt(lease: Lease, rootId: RunId, promptId: string): Promise<PromptRecord | undefined>;

  // ---- reads
  /** True when any message was ever sent to this root run (cheap; lets a driver skip message work). */
  hasMail(rootId: RunId): Promise<boolean>;
  /** Queued deliveries bound to started stages of the root, oldest first. */
  liveQueued(rootId: RunId): Promise<LiveDelivery[]>;
  stages(rootId: RunId): Promise<StageRow[]>;
  messagesOf(rootId: RunId): Promise<{ messages: MessageRecord[]; deliveries: DeliveryRecord[] }>;
  getPrompt(rootId: RunId, promptId: string): Promise<PromptRecord | undefined>;
  prompts(rootId: RunId, state?: PromptState): Promise<PromptRecord[]>;
}
