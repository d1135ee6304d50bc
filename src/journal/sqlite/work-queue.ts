/**
 * The work queue on SQLite: stage executions waiting for, held by, or done
 * by workers (states and transitions: see WorkState in ../work-queue.ts).
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
 * Operation ids make completion idempotent: the commit stores its op id
 * and the body's digest on the item itself (migration 10; a unique index
 * keeps an op id to one item); a retry finds them there and is answered
 * "committed" again, a reuse with another digest, or for another item, is
 * refused. The first commit writes them in the same statement as the
 * outcome: no lookup before it, no row of another table (measured on a
 * 500-item queue: a complete-and-claim transaction 45 against 34 µs).
 *
 * Statements are prepared once and run synchronously inside BEGIN
 * IMMEDIATE, like the append path (statements.ts explains why).
 */

import type { Database, Statement } from "bun:sqlite";
import type { ErrorInfo } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import { LeaseLostError } from "../../shared/errors.ts";
import type { Lease } from "../runs.ts";
import { isHostScope, type ClaimFilter, type ClaimScope, type WorkCommit, type WorkCommitted, type WorkFence, type WorkItem, type CompletionReceipt, type WorkQueue, type WorkReceipt, type WorkState } from "../work-queue.ts";
import { writeTransaction, type Statements } from "./statements.ts";
import { toJson, workFromRow, type WorkItemsTable } from "./tables.ts";

type Fence = [id: string, workerId: string, generation: number, epoch: number];

export class SqliteWorkQueue implements WorkQueue {
  private readonly oldestReady: Statement<ReadyRow, []>;
  private readonly oldestReadyOfRoot: Statement<ReadyRow, [rootId: string, rootEpoch: number]>;
  private readonly rootLease: Statement<{ epoch: number; expires_at: number }, [rootId: string]>;
  private readonly abandonRow: Statement<unknown, [now: number, rowid: number]>;
  private readonly readyById: Statement<ReadyRow, [id: string]>;
  private readonly leaseRow: Statement<unknown, [workerId: string, epoch: number, expiresAt: number, now: number, rowid: number]>;
  private readonly renewOne: Statement<unknown, [expiresAt: number, now: number, ...Fence]>;
  private readonly finish: Statement<unknown, [state: string, result: string | null, error: string | null, now: number, opId: string, digest: string, ...Fence]>;
  private readonly requeue: Statement<WorkItemsTable, [now: number, ...Fence]>;
  private readonly giveUp: Statement<WorkItemsTable, [error: string, now: number, ...Fence]>;
  private readonly byId: Statement<WorkItemsTable, [id: string]>;
  private readonly opElsewhere: Statement<{ id: string }, [opId: string]>;
  private readonly byRoot: Statement<WorkItemsTable, [rootId: string]>;
  private readonly abandonRoot: Statement<unknown, [now: number, rootId: string, epoch: number]>;
  private readonly countAll: Statement<{ n: number }, []>;
  private readonly countState: Statement<{ n: number }, [state: string]>;

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
    // No RETURNING: a committed receipt names no item (CompletionReceipt), and RETURNING keeps its rows in a temporary table.
    this.finish = db.prepare(
      `update work_items set state = ?, result = ?, error = ?, lease_expires_at = null, updated_at = ?, op_id = ?, op_digest = ?
        where ${fence}`,
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
    this.opElsewhere = db.prepare("select id from work_items where op_id = ?");
    this.byRoot = db.prepare("select * from work_items where root_id = ? order by created_at, id");
    this.abandonRoot = db.prepare(
      `update work_items set state = 'abandoned', lease_expires_at = null, updated_at = ?
        where root_id = ? and root_epoch < ? and state in ('ready', 'leased')`,
    );
    this.countAll = db.prepare("select count(*) as n from work_items");
    this.countState = db.prepare("select count(*) as n from work_items where state = ?");
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

  async claimMany(workerIds: readonly string[], leaseMs: number, root?: ClaimFilter): Promise<WorkItem[]> {
    if (workerIds.length === 0) return [];
    return this.tx(() => {
      const items: WorkItem[] = [];
      for (const workerId of workerIds) {
        const item = this.claimOne(workerId, leaseMs, root);
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
  ): Promise<CompletionReceipt> {
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
   * Inside a transaction: lease the oldest ready item to `workerId`.
   * Scoped to a root, only that drive's items qualify, and none once its lease moved
   * on; unscoped, an item whose root lease moved on is abandoned on the way.
   */
  private claimOne(workerId: string, leaseMs: number, filter: ClaimFilter | undefined): WorkItem | undefined {
    // Queues are the hosts' business (../fleet.ts): this journal has no hosts, so its pool claims every queue.
    if (isHostScope(filter)) throw new Error("internal: worker hosts claim from a shared journal, not the embedded one");
    const root: ClaimScope | undefined = filter;
    if (root) {
      if (!this.rootLeaseHolds(root.rootId, root.epoch)) return undefined;
      const row = this.oldestReadyOfRoot.get(root.rootId, root.epoch);
      return row ? this.lease(row, workerId, leaseMs) : undefined;
    }
    for (let row = this.oldestReady.get(); row; row = this.oldestReady.get()) {
      if (this.rootLeaseHolds(row.root_id, row.root_epoch)) return this.lease(row, workerId, leaseMs);
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

  /** Inside a transaction: lease a ready row just read. */
  private lease(row: ReadyRow, workerId: string, leaseMs: number): WorkItem {
    const now = Date.now();
    const item = workFromRow({ ...row, state: "leased", worker_id: workerId, epoch: row.epoch + 1, lease_expires_at: now + leaseMs, updated_at: now });
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
  ): { receipt: CompletionReceipt; fresh: boolean } {
    const error = outcome.error ? JSON.stringify(outcome.error) : null;
    let changes: number;
    try {
      changes = this.finish.run(outcome.state, toJson(outcome.result), error, Date.now(), op.id, op.digest, ...fenceOf(fence)).changes;
    } catch (err) {
      // The op id is another item's (work_by_op): this statement alone is undone, and nothing else changed.
      if (isUniqueViolation(err)) return { receipt: { status: "op_conflict" }, fresh: false };
      throw err;
    }
    if (changes === 1) return { receipt: COMMITTED, fresh: true };
    // Nothing changed: a retry of this item's commit, or the fence no longer holds. Only a commit is remembered
    // (a stale answer may change: it never becomes a commit, but the item moves on).
    const row = this.byId.get(fence.id);
    if (row && row.op_id === op.id) return { receipt: row.op_digest === op.digest ? COMMITTED : { status: "op_conflict" }, fresh: false };
    if (this.opElsewhere.get(op.id)) return { receipt: { status: "op_conflict" }, fresh: false };
    return { receipt: { status: "stale", item: row ? workFromRow(row) : undefined }, fresh: false };
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

const COMMITTED: CompletionReceipt = { status: "committed" };

function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: string } | null)?.code === "SQLITE_CONSTRAINT_UNIQUE";
}

function fenceOf(f: WorkFence): Fence {
  return [f.id, f.workerId, f.generation, f.epoch];
}

