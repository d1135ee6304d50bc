/**
 * The work queue on SQLite: stage executions waiting for, held by, or done
 * by workers (states and transitions: see WorkState in ../types.ts).
 *
 * Every statement that changes a leased item is owner-fenced: it names the
 * item, the worker, the generation and the epoch it believes current
 * (`where id = ? and worker_id = ? and generation = ? and epoch = ? and
 * state = 'leased'`). A worker that was replaced (older generation) or
 * whose lease was re-issued (older epoch) changes nothing and is told
 * "stale". A claim reads the oldest ready item (partial index on ready
 * rows) and then leases it by rowid, both under the write lock that BEGIN
 * IMMEDIATE took, so nothing else can take the item in between; the lease
 * is known before it is written, and `claimMany` hands it to its caller at
 * that point (the coordinator starts the stage while the lease is written
 * and committed: see dispatch() in ../../pool/dispatcher.ts).
 * The coordinator's hot path is one transaction per stage: `completeAndClaim`
 * commits a worker's outcome and leases its next item together
 * (`completeMany`: those of every worker heard from in one turn), and
 * `claimMany` leases items for every idle worker at once; each of these
 * transactions holds the write lock for a few statements only, since it
 * contends with the root's (fsynced) appends for it.
 *
 * Operation ids make completion idempotent: the receipt of the first
 * commit is stored with the op id and the body's digest; a retry returns
 * it, a reuse with another digest is refused.
 *
 * Statements are prepared once and run synchronously inside BEGIN
 * IMMEDIATE, like the append path (statements.ts explains why).
 */

import type { Database, Statement } from "bun:sqlite";
import type { ErrorInfo } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import { LeaseLostError } from "../../shared/errors.ts";
import {
  isHostScope,
  type ClaimFilter,
  type ClaimScope,
  type Lease,
  type WorkCommit,
  type WorkCommitted,
  type WorkFence,
  type WorkItem,
  type WorkQueue,
  type WorkReceipt,
  type WorkState,
} from "../types.ts";
import { writeTransaction, type Statements } from "./statements.ts";
import { toJson, workFromRow, type WorkItemsTable, type WorkOpsTable } from "./tables.ts";

type Fence = [id: string, workerId: string, generation: number, epoch: number];

export class SqliteWorkQueue implements WorkQueue {
  private readonly oldestReady: Statement<ReadyRow, []>;
  private readonly oldestReadyOfRoot: Statement<ReadyRow, [rootId: string, rootEpoch: number]>;
  private readonly rootLease: Statement<{ epoch: number; expires_at: number }, [rootId: string]>;
  private readonly abandonRow: Statement<unknown, [now: number, rowid: number]>;
  private readonly readyById: Statement<ReadyRow, [id: string]>;
  private readonly leaseRow: Statement<unknown, [workerId: string, epoch: number, expiresAt: number, now: number, rowid: number]>;
  private readonly renewOne: Statement<unknown, [expiresAt: number, now: number, ...Fence]>;
  private readonly finish: Statement<WorkItemsTable, [state: string, result: string | null, error: string | null, now: number, ...Fence]>;
  private readonly requeue: Statement<WorkItemsTable, [now: number, ...Fence]>;
  private readonly giveUp: Statement<WorkItemsTable, [error: string, now: number, ...Fence]>;
  private readonly byId: Statement<WorkItemsTable, [id: string]>;
  private readonly byRoot: Statement<WorkItemsTable, [rootId: string]>;
  private readonly abandonRoot: Statement<unknown, [now: number, rootId: string, epoch: number]>;
  private readonly countAll: Statement<{ n: number }, []>;
  private readonly countState: Statement<{ n: number }, [state: string]>;
  private readonly selectOp: Statement<WorkOpsTable, [opId: string]>;
  private readonly insertOp: Statement<unknown, [opId: string, workId: string, digest: string, receipt: string, at: number]>;

  constructor(
    db: Database,
    private readonly s: Statements,
    /** Maps a storage failure to a StorageError, like every journal call. */
    private readonly guard: <T>(fn: () => T) => Promise<T>,
  ) {
    const fence = "id = ? and worker_id = ? and generation = ? and epoch = ? and state = 'leased'";
    // INDEXED BY: without statistics SQLite picks work_by_root (root_id) for the root's claim and sorts every
    // ready item of the root on each claim (about 100 us with 2,000 queued); the partial index on ready rows is
    // already in FIFO order, so the oldest is its first entry of that root (8 us).
    // The lease is written by rowid, which the read returns: by id the update would walk the primary key's index
    // too, pages that another process's commit (the root's) has just made this connection reload (an idle claim,
    // measured: 35 against 23 us for the update). A read and an update by rowid cost less than one
    // `update ... returning *` (measured: 10 against 14 us, and the commit 7.6 against 9.5 us: RETURNING keeps
    // its rows in a temporary table), and they let the lease be handed out before it is written.
    const oldest = "select rowid as rid, * from work_items indexed by work_ready where state = 'ready'";
    this.oldestReady = db.prepare(`${oldest} order by ready_at, id limit 1`);
    this.oldestReadyOfRoot = db.prepare(`${oldest} and root_id = ? and root_epoch = ? order by ready_at, id limit 1`);
    // A root's lease while someone holds it (a released lease fences every item of the root).
    this.rootLease = db.prepare("select epoch, renewed_at + timeout_ms as expires_at from leases where run_id = ? and released = 0");
    this.abandonRow = db.prepare("update work_items set state = 'abandoned', updated_at = ? where rowid = ? and state = 'ready'");
    this.readyById = db.prepare("select rowid as rid, * from work_items where id = ? and state = 'ready'");
    this.leaseRow = db.prepare(
      "update work_items set state = 'leased', worker_id = ?, epoch = ?, lease_expires_at = ?, updated_at = ? where rowid = ? and state = 'ready'",
    );
    this.renewOne = db.prepare(`update work_items set lease_expires_at = ?, updated_at = ? where ${fence}`);
    this.finish = db.prepare(
      `update work_items set state = ?, result = ?, error = ?, lease_expires_at = null, updated_at = ?
        where ${fence} returning *`,
    );
    this.requeue = db.prepare(
      `update work_items set state = 'ready', generation = generation + 1, worker_id = null,
                             lease_expires_at = null, ready_at = ?1, updated_at = ?1
        where id = ?2 and worker_id = ?3 and generation = ?4 and epoch = ?5 and state = 'leased'
        returning *`,
    );
    this.giveUp = db.prepare(
      `update work_items set state = 'failed', error = ?, lease_expires_at = null, updated_at = ?
        where ${fence} returning *`,
    );
    this.byId = db.prepare("select * from work_items where id = ?");
    this.byRoot = db.prepare("select * from work_items where root_id = ? order by created_at, id");
    this.abandonRoot = db.prepare(
      `update work_items set state = 'abandoned', lease_expires_at = null, updated_at = ?
        where root_id = ? and root_epoch < ? and state in ('ready', 'leased')`,
    );
    this.countAll = db.prepare("select count(*) as n from work_items");
    this.countState = db.prepare("select count(*) as n from work_items where state = ?");
    this.selectOp = db.prepare("select * from work_ops where op_id = ?");
    this.insertOp = db.prepare("insert into work_ops (op_id, work_id, digest, receipt, at) values (?, ?, ?, ?, ?)");
  }

  async claim(workerId: string, leaseMs: number, root?: ClaimFilter): Promise<WorkItem | undefined> {
    return this.tx(() => this.claimOne(workerId, leaseMs, root));
  }

  async claimItem(id: string, workerId: string, leaseMs: number): Promise<WorkItem | undefined> {
    return this.tx(() => {
      const row = this.readyById.get(id);
      return row ? this.lease(row, workerId, leaseMs) : undefined;
    });
  }

  async claimMany(
    workerIds: readonly string[],
    leaseMs: number,
    root?: ClaimFilter,
    onLeased?: (item: WorkItem, index: number) => void,
  ): Promise<WorkItem[]> {
    if (workerIds.length === 0) return [];
    return this.tx(() => {
      const items: WorkItem[] = [];
      for (const workerId of workerIds) {
        const item = this.claimOne(workerId, leaseMs, root, onLeased && ((leased) => onLeased(leased, items.length)));
        if (!item) break;
        items.push(item);
      }
      return items;
    });
  }

  async renew(fences: readonly WorkFence[], leaseMs: number): Promise<WorkFence[]> {
    if (fences.length === 0) return [];
    return this.tx(() => {
      const now = Date.now();
      return fences.filter((f) => this.renewOne.run(now + leaseMs, now, ...fenceOf(f)).changes === 0);
    });
  }

  async complete(
    fence: WorkFence,
    outcome: { state: "completed" | "failed"; result?: unknown; error?: ErrorInfo },
    op: { id: string; digest: string },
  ): Promise<WorkReceipt> {
    return this.tx(() => this.completeOne(fence, outcome, op).receipt);
  }

  async completeAndClaim(
    fence: WorkFence,
    outcome: { state: "completed" | "failed"; result?: unknown; error?: ErrorInfo },
    op: { id: string; digest: string },
    claimNext: { leaseMs: number; root?: ClaimFilter },
  ): Promise<WorkCommitted> {
    return this.tx(() => this.commitOne({ fence, outcome, op, claimNext }));
  }

  async completeMany(commits: readonly WorkCommit[]): Promise<WorkCommitted[]> {
    if (commits.length === 0) return [];
    return this.tx(() => commits.map((c) => this.commitOne(c)));
  }

  /** Inside a transaction: one outcome, and the worker's next item when it asks for one and the outcome was a first commit. */
  private commitOne({ fence, outcome, op, claimNext }: WorkCommit): WorkCommitted {
    const { receipt, fresh } = this.completeOne(fence, outcome, op);
    return { receipt, next: fresh && claimNext ? this.claimOne(fence.workerId, claimNext.leaseMs, claimNext.root) : undefined };
  }

  async release(fence: WorkFence, maxGenerations: number, error: ErrorInfo): Promise<WorkReceipt> {
    return this.tx(() => {
      const now = Date.now();
      const row =
        fence.generation >= maxGenerations
          ? this.giveUp.get(JSON.stringify(error), now, ...fenceOf(fence))
          : this.requeue.get(now, ...fenceOf(fence));
      return row ? { status: "committed", item: workFromRow(row) } : { status: "stale", item: this.current(fence.id) };
    });
  }

  async get(id: string): Promise<WorkItem | undefined> {
    return this.guard(() => this.current(id));
  }

  async list(rootId: RunId): Promise<WorkItem[]> {
    return this.guard(() => this.byRoot.all(rootId).map(workFromRow));
  }

  async abandon(lease: Lease): Promise<number> {
    return this.tx(() => {
      if (!this.s.selectHeldLease.get(lease.rootId, lease.holderId, lease.epoch)) throw new LeaseLostError(lease.rootId, lease.epoch);
      return this.abandonRoot.run(Date.now(), lease.rootId, lease.epoch).changes;
    });
  }

  async count(state?: WorkState): Promise<number> {
    return this.guard(() => (state === undefined ? this.countAll.get() : this.countState.get(state))?.n ?? 0);
  }

  /**
   * Inside a transaction: lease the oldest ready item to `workerId`;
   * `onLeased` gets the leased item before the lease is written. Scoped to
   * a root, only that drive's items qualify, and none once its lease moved
   * on; unscoped, an item whose root lease moved on is abandoned on the way.
   */
  private claimOne(
    workerId: string,
    leaseMs: number,
    filter: ClaimFilter | undefined,
    onLeased?: (item: WorkItem) => void,
  ): WorkItem | undefined {
    // Queues are the hosts' business (../fleet.ts): this journal has no hosts, so its pool claims every queue.
    if (isHostScope(filter)) throw new Error("internal: worker hosts claim from a shared journal, not the embedded one");
    const root: ClaimScope | undefined = filter;
    if (root) {
      if (!this.rootLeaseHolds(root.rootId, root.epoch)) return undefined;
      const row = this.oldestReadyOfRoot.get(root.rootId, root.epoch);
      return row ? this.lease(row, workerId, leaseMs, onLeased) : undefined;
    }
    for (let row = this.oldestReady.get(); row; row = this.oldestReady.get()) {
      if (this.rootLeaseHolds(row.root_id, row.root_epoch)) return this.lease(row, workerId, leaseMs, onLeased);
      this.abandonRow.run(Date.now(), row.rid);
    }
    return undefined;
  }

  /**
   * The root's lease is at `epoch` and not expired. An expired one counts as
   * stale too: its driver stops itself before the expiry (lease-keeper.ts),
   * so nothing it enqueued may start any more.
   */
  private rootLeaseHolds(rootId: string, epoch: number): boolean {
    const lease = this.rootLease.get(rootId);
    return !!lease && lease.epoch === epoch && lease.expires_at >= Date.now();
  }

  /** Inside a transaction: lease a ready row just read; `onLeased` gets the item before the lease is written. */
  private lease(row: ReadyRow, workerId: string, leaseMs: number, onLeased?: (item: WorkItem) => void): WorkItem {
    const now = Date.now();
    const item = workFromRow({ ...row, state: "leased", worker_id: workerId, epoch: row.epoch + 1, lease_expires_at: now + leaseMs, updated_at: now });
    onLeased?.(item);
    // Under this transaction's write lock the row is still the ready one just read.
    if (this.leaseRow.run(workerId, item.epoch, now + leaseMs, now, row.rid).changes !== 1) {
      throw new Error(`internal: work item ${row.id} changed under the claim's write lock`);
    }
    return item;
  }

  /** Inside a transaction: commit an outcome (fenced, idempotent by op id); `fresh` when this call committed it. */
  private completeOne(
    fence: WorkFence,
    outcome: { state: "completed" | "failed"; result?: unknown; error?: ErrorInfo },
    op: { id: string; digest: string },
  ): { receipt: WorkReceipt; fresh: boolean } {
    const seen = this.selectOp.get(op.id);
    if (seen) {
      if (seen.digest !== op.digest || seen.work_id !== fence.id) return { receipt: { status: "op_conflict" }, fresh: false };
      // Stored as `{status: "committed"}`; journals written before kept the whole receipt, item included.
      const stored = JSON.parse(seen.receipt) as { status: "committed"; item?: WorkItem };
      // A committed item never changes again: its receipt is rebuilt from it.
      const receipt: WorkReceipt = { status: "committed", item: stored.item ?? this.current(fence.id)! };
      return { receipt, fresh: false };
    }
    const now = Date.now();
    const row = this.finish.get(outcome.state, toJson(outcome.result), outcome.error ? JSON.stringify(outcome.error) : null, now, ...fenceOf(fence));
    const receipt: WorkReceipt = row ? { status: "committed", item: workFromRow(row) } : { status: "stale", item: this.current(fence.id) };
    // Only a commit is remembered (a stale answer may change: it never becomes a commit, but the item moves on),
    // and only as "committed": the item it names is rebuilt on a retry, not stored twice.
    if (row) this.insertOp.run(op.id, fence.id, op.digest, COMMITTED_RECEIPT, now);
    return { receipt, fresh: !!row };
  }

  private tx<T>(fn: () => T): Promise<T> {
    return this.guard(() => writeTransaction(this.s, fn));
  }

  finalize(): void {
    for (const value of Object.values(this)) {
      if (value && typeof value === "object" && "finalize" in value && value !== this.s && typeof value !== "function") {
        (value as Statement).finalize();
      }
    }
  }

  private current(id: string): WorkItem | undefined {
    const row = this.byId.get(id);
    return row ? workFromRow(row) : undefined;
  }
}

/** A ready item as a claim reads it: the row and its rowid. */
type ReadyRow = WorkItemsTable & { rid: number };

/** What work_ops keeps for a committed operation. */
const COMMITTED_RECEIPT = JSON.stringify({ status: "committed" });

function fenceOf(f: WorkFence): Fence {
  return [f.id, f.workerId, f.generation, f.epoch];
}

