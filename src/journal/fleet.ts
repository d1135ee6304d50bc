/**
 * The journal's side of worker hosts (`atomic worker` on other machines,
 * README "Running on several machines"): what a shared database holds so
 * that hosts run stages of any run and the run's root hears of them. Only a
 * journal that several machines can share has one (`Journal.fleet`: the
 * Postgres journal); the embedded one has none and its pool claims every
 * item itself.
 *
 * - Queues: every work item has one (its request's `queue`, "default" when
 *   the stage named none). A host claims only the items of the queues it
 *   serves and of the pool protocol it speaks (HostClaimScope), any root's,
 *   as long as that root's lease holds and no claim hold holds the root.
 *   A root's own pool claims its items of the default queue only.
 * - Claim holds, by root and kind: `paused` (the run is paused: hosts claim
 *   nothing of it); `result:<work id>` (a host committed the result of a
 *   stage of a run with a spending limit, StageRequest.budgeted: no host,
 *   nor the root's own pool, claims more of that root until the root
 *   counted it and said whether its budget is used up, or for at most ten
 *   seconds); `spent` (the budget is used up: nothing more of the drive is
 *   claimed). So no stage starts on a host after the result that used a
 *   budget up; what overshoots is what was running then. A drive clears
 *   its root's budget holds when it starts and every hold when it ends.
 * - Hosts: one row each, refreshed by its heartbeat (every second): what
 *   `atomic workers` lists and what tells a root that no live host serves
 *   a queue. Silence is judged by the database clock.
 * - Up (host → root): the pool protocol's messages about a remote stage
 *   (live events in batches, delivery answers), consumed by the root that
 *   drives the run; a stage's result is its work item's committed outcome,
 *   read from the queue (`settled`).
 * - Down (root → host): cancel, deliver and wrap-up for a remote stage,
 *   read by the host that runs the item (`downFor`), deleted with the item's
 *   end.
 * - Wake-ups: LISTEN/NOTIFY, one channel per journal schema for hosts (new
 *   ready items, messages down) and one per root (results, messages up);
 *   every reader also polls, so a lost notification costs a poll period,
 *   never a stage.
 * - Reaping: a leased item whose lease expired by the database clock (its
 *   host stopped renewing: crashed, partitioned) goes back to ready at the
 *   next generation, or fails with worker_retry_limit after the last one.
 *   Any host, and the root for its own items, reaps; the fence on every
 *   later write makes the dead host's late commits stale. Only items a
 *   host's worker (`…@<host id>`) holds: a run's own pool judges its
 *   workers itself (its supervisor, which does not charge its own stalls
 *   to them).
 */

import type { ErrorInfo } from "../shared/errors.ts";
import type { LiveChannelOpener } from "../shared/live-channel.ts";
import type { RunId } from "../shared/ids.ts";
import type { WorkItem } from "./work-queue.ts";

export const DEFAULT_QUEUE = "default";

export type HostState = "running" | "draining" | "stopped";

export interface HostInfo {
  hostId: string;
  version: string;
  protocol: number;
  schemaVersion: number;
  queues: string[];
  slots: number;
  busy: number;
  state: HostState;
  workdir: string;
  pid: number;
  /** Why it refuses work it sees (another pool protocol), in one sentence; null when it refuses none. */
  refused: string | null;
}

export interface HostRecord extends HostInfo {
  startedAt: number;
  heartbeatAt: number;
  /** Since its last heartbeat, by the database clock (ms). */
  silentMs: number;
}

/** Ready items of one queue: how many, and since when the oldest waits. */
export interface QueueDemand {
  queue: string;
  ready: number;
  oldestReadyAt: number;
}

/** A leased item whose worker is a worker host's (`<worker>@<host id>`): what `atomic workers` lists as busy. */
export interface HostWork {
  workId: string;
  rootId: RunId;
  runId: RunId;
  stageKey: string;
  stageName: string;
  attempt: number;
  generation: number;
  queue: string;
  workerId: string;
  /** The part of the worker id after its `@`. */
  hostId: string;
  leaseExpiresAt: number | null;
}

export interface DownMessage {
  seq: number;
  rootId: RunId;
  workId: string;
  body: unknown;
}

export type FleetWake = { kind: "hosts" } | { kind: "root"; rootId: RunId };

export interface FleetStore {
  /** Registers or refreshes a host's row. */
  heartbeat(host: HostInfo): Promise<void>;
  hosts(): Promise<HostRecord[]>;
  /** Every item leased to a worker host's worker (read only; for listings). */
  hostWork(): Promise<HostWork[]>;
  /**
   * Expired leases held by worker hosts' workers (of `rootId`'s items, or
   * every root's) given back: ready
   * at the next generation, or failed with `error` once `maxGenerations`
   * were used. Returns the items changed.
   */
  reapExpired(maxGenerations: number, error: ErrorInfo, rootId?: RunId): Promise<WorkItem[]>;
  /** The schema version the journal is at now (a newer atomic may have migrated it since this process opened it). */
  schemaVersion(): Promise<number>;
  /**
   * The journal's identity: made once, at random, by the first host that asks (kept in the journal), the same
   * for every host of this journal whatever address it reaches the database by. A host marks the worktrees it
   * makes with it, so its sweep removes its own only (fleet/host-worktree-sweep.ts).
   */
  journalId(): Promise<string>;
  /** Pool protocols other than `protocol` that ready items of `queues` ask for (a newer or older root). */
  foreignProtocols(queues: readonly string[], protocol: number): Promise<number[]>;
  /** Messages for `rootId`'s driver (it is woken). */
  postUp(rootId: RunId, bodies: readonly unknown[]): Promise<void>;
  /** Every message for `rootId` committed so far, taken off the table, in order. */
  takeUp(rootId: RunId): Promise<unknown[]>;
  /** A message for the host that runs `workId` (hosts are woken). */
  postDown(rootId: RunId, workId: string, body: unknown): Promise<void>;
  /** The messages for these items, in order. */
  downFor(workIds: readonly string[]): Promise<DownMessage[]>;
  /** Deletes the messages for these items (they ended) and any older than an hour. */
  dropDown(workIds: readonly string[]): Promise<void>;
  /** Pauses (holds) or unpauses a root's items for every host (the `paused` claim hold). */
  hold(rootId: RunId, paused: boolean): Promise<void>;
  /**
   * The root counted the budgeted result of `workId` (its `result:` hold goes), or its budget ran out
   * (`exhausted`: the `spent` hold comes, in the same statement); hosts are woken.
   */
  budgetCounted(rootId: RunId, workId: string | undefined, exhausted: boolean): Promise<void>;
  /** Deletes a root's claim holds: the budget's (`spent`, `result:…`; a new drive starts) or all of them (the drive ended). */
  releaseHolds(rootId: RunId, which: "budget" | "all"): Promise<void>;
  /** Wakes hosts (new ready items). */
  wakeHosts(): Promise<void>;
  /** Wakes the drivers of these roots (their items settled). */
  wakeRoots(rootIds: readonly RunId[]): Promise<void>;
  /** The settled ones (completed, failed, abandoned) among these items. */
  settled(ids: readonly string[]): Promise<WorkItem[]>;
  /** Ready items per queue. */
  demand(): Promise<QueueDemand[]>;
  /**
   * Listens for wake-ups on a connection of its own (`root`: that root's
   * too). `onLost` is told when the connection drops; the caller listens
   * again later (and polls meanwhile).
   */
  listen(onWake: (wake: FleetWake) => void, opts: { root?: RunId; onLost?: (err: Error) => void }): Promise<{ close(): Promise<void> }>;
  /**
   * Live stage events across machines (shared/live-channel.ts): watchers'
   * asks and hosts' relayed events as notifications on a connection of its
   * own, never stored.
   */
  liveChannel: LiveChannelOpener;
}
