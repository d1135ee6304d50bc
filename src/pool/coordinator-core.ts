/**
 * What the parts of the pool coordinator share (coordinator.ts wires them):
 *
 * - root-channel.ts: the IPC channel to the root, both ways;
 * - supervisor.ts: the worker processes, their heartbeats and the liveness
 *   sweep, and what happens to the item of a worker that is lost;
 * - dispatcher.ts: handing ready items to idle workers (fenced claims),
 *   committing their results, and settling items the root cancelled.
 *
 * Each part reaches the others only through this interface, so the parts
 * depend on one small surface rather than on each other's internals. It
 * names what a part asks of another (WorkerPool, WorkDispatch) by shape,
 * not by importing the part: the parts import this file, and it imports
 * none of them.
 */

import type { Journal } from "../journal/journal.ts";
import type { ClaimFilter, WorkFence, WorkItem } from "../journal/work-queue.ts";
import type { RunnerEvent, StageRequest } from "../runners/types.ts";
import type { StageResult } from "../sdk/types.ts";
import type { FromCoordinator } from "./protocol/root-coordinator.ts";
import type { RunId } from "../shared/ids.ts";
import type { FromWorker } from "./protocol/coordinator-worker.ts";
import type { CoordinatorConfig } from "./protocol/root-coordinator.ts";
import type { StallMonitor } from "./stall-monitor.ts";
import type { WorkerSlot } from "./worker-slot.ts";

/** What the parts read of a pool's configuration (a run's pool: CoordinatorConfig; a worker host: its options). */
export type PoolSettings = Pick<CoordinatorConfig, "workers" | "leaseMs" | "heartbeatMs" | "retireGraceMs" | "maxGenerations" | "startupTimeoutMs" | "logDir" | "home">;

export interface CoordinatorCore {
  readonly config: PoolSettings;
  /** This process's own event-loop stalls, credited to workers' leases. */
  readonly stall: StallMonitor;
  /** Open once `attached` (nothing is claimed before). */
  readonly journal: Journal;
  readonly attached: boolean;
  readonly paused: boolean;
  readonly shuttingDown: boolean;
  /** Whose items this pool claims: its root's drive (a run's own pool), or some queues of any root (a worker host). */
  readonly claimScope: ClaimFilter;
  readonly root: RootLink;
  readonly workers: WorkerPool;
  readonly dispatcher: WorkDispatch;
  log(line: string): void;
  /** The pool cannot go on: the root is told (`fatal`) and everything stops. */
  fatal(code: string, message: string): void;
  /**
   * A claimed item's request as it runs here (a worker host puts its files
   * under its own home and resolves its cwd), or why it cannot run here at
   * all (the item fails with that sentence, and `code`: default bad_cwd). Absent: as enqueued.
   */
  localize?(item: WorkItem): StageRequest | { refused: string; code?: string };
  /**
   * What `localize` needs of a claimed item and must read first (a worker host: the run's recorded
   * environment, once per run), awaited before the item is started; undefined when there is nothing to read.
   */
  prepare?(item: WorkItem): Promise<void> | undefined;
  /** Worker ids end in `@<hostId>` on a worker host (the root tells where a stage ran from its result's worker id). */
  readonly hostId?: string;
  /**
   * A worker's result for `item` is about to be committed: its session files go to the artifact store first (a
   * run's own pool on a shared journal, ./shared-sessions.ts); undefined when there is nothing to wait for. Never throws.
   */
  shipSession?(item: WorkItem): Promise<void> | undefined;
  /** A worker's result for `workId` is about to be committed (a worker host ships the stage's last files first). Never throws. */
  beforeCommit?(workId: string): Promise<void>;
  /** A worker's result for `workId` as it is committed (a worker host pushes the branch of a stage run in its own worktree). Never throws. */
  finish?(workId: string, result: StageResult): Promise<StageResult>;
  /**
   * Where a result goes that the journal did not take (a worker host's
   * outbox, ../fleet/outbox.ts): true when it was kept, and the worker is
   * answered as if it were committed. Absent: the worker sends it again.
   */
  keepUncommitted?(item: { id: string; rootId: RunId }, fence: WorkFence, outcome: { state: "completed" | "failed"; result?: unknown }, op: { id: string; digest: string }): boolean;
  /** A journal write failed: if the journal takes no writes now (writeStopped), the pool fails at once with storage_unavailable. */
  storageFailed(err: unknown): boolean;
}

/** What the other parts ask of the worker processes (supervisor.ts). */
export interface WorkerPool {
  /** The workers waiting for an item. */
  idle(): WorkerSlot[];
  /** The worker running `workId`, if any. */
  running(workId: string): WorkerSlot | undefined;
  /** Stop giving `slot` work and replace its process. */
  retire(slot: WorkerSlot): void;
  /** `stages` wait for workers (queued or running): start workers up to that many (at most the configured number). */
  want(stages: number): void;
}

/** What the other parts ask of the dispatcher (dispatcher.ts). */
export interface WorkDispatch {
  /** Hand ready items to idle workers. */
  dispatch(): Promise<void>;
  /** Commit a worker's result. */
  complete(slot: WorkerSlot, msg: Extract<FromWorker, { type: "complete" }>): Promise<void>;
  /** The root asks where `workId` is. */
  status(workId: string): Promise<void>;
  /** The root cancelled `workId` and no worker runs it. */
  cancelQueued(workId: string): void;
  /** The root counted the result of budgeted `workId` (or its budget ran out: none): claims held for it go on, or stop for good when `exhausted`. */
  budgetCounted(workId: string | undefined, exhausted: boolean): void;
}

/**
 * The way to the root(s) whose stages the pool runs: the IPC channel to the
 * one root that started it (root-channel.ts), or the shared journal for a
 * worker host (../fleet/host-link.ts).
 */
export interface RootLink {
  /** A batch of live runner events of `workId`, as its worker sent it (`hold`: its result follows at once, so the events may ride on it). */
  events(workId: string, events: RunnerEvent[], opts?: { hold?: boolean }): void;
  /** The item settled with `result` (once per item; a second call sends nothing). */
  done(workId: string, result: StageResult): void;
  send(msg: FromCoordinator): void;
}
