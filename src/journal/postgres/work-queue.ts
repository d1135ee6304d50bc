/**
 * The work queue on Postgres: stage executions waiting for, held by, or done
 * by workers (states and transitions: WorkState in ../work-queue.ts), with the
 * same generations, epochs and operation ids as the SQLite queue.
 *
 * Locks, statement by statement (READ COMMITTED throughout):
 * - A claim is one `UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)`:
 *   the oldest ready rows (partial indexes on ready rows, FIFO by ready_at,
 *   id: work_ready_by_root for a drive's claims, work_ready for unscoped
 *   ones) are row-locked by the inner select, skipping rows another claim has
 *   locked, and leased by the update in the same statement. FOR UPDATE
 *   re-checks `state = 'ready'` on the newest row version, so a row that
 *   another claim leased meanwhile is passed over, never leased twice.
 *   The root's lease check (epoch, not released, not expired by the
 *   database clock) is a condition of the same statement. A takeover that
 *   commits after that check cannot leave a stale lease behind: the new
 *   drive's `abandon` updates the same rows, waits for the claim's row
 *   locks, and re-evaluates them once the claim committed (leased, older
 *   root epoch: abandoned).
 * - `claimMany` claims for all its workers in that one statement
 *   (`row_number()` over the locked rows gives the i-th oldest to the i-th
 *   worker).
 * - Every change to a leased item is owner-fenced inside its UPDATE's
 *   WHERE (`id, worker_id, generation, epoch, state = 'leased'`): the row
 *   lock the update takes makes the check and the change one step.
 * - `complete` is one statement: it reads the operation id, commits the
 *   outcome (fenced, only if the id is unseen) and records the id. Two
 *   commits with the same id race on the item's row lock; the loser finds
 *   the item moved on and re-reads the operation: the winner's receipt. The
 *   same id reused for another item at the same moment: the second insert
 *   violates work_ops' primary key, the whole statement rolls back, and it
 *   runs again (now seeing the id: op_conflict).
 * - `completeAndClaim` chains the claim onto that statement, gated on the
 *   commit having happened: one round trip per stage. `completeMany` makes
 *   those calls one after another.
 * - `abandon` holds the root's lease row FOR SHARE for its statement, so a
 *   takeover waits until it is done.
 * Times come from the database clock (statement_timestamp(), in ms), so
 * leases mean the same on every host.
 */

import type { ErrorInfo } from "../../shared/errors.ts";
import { LeaseLostError } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import type { Lease } from "../runs.ts";
import { isHostScope, type ClaimFilter, type WorkCommit, type WorkCommitted, type WorkFence, type WorkItem, type WorkQueue, type WorkReceipt, type WorkState, type CompletionReceipt } from "../work-queue.ts";
import { NOW_MS, type PgQuery, type PgSession } from "./store-session.ts";
import { toJson, workFromRow, type WorkItemsTable as WorkRow } from "../sqlite/tables.ts";

type Outcome = { state: "completed" | "failed"; result?: unknown; error?: ErrorInfo };
type Op = { id: string; digest: string };

/** What work_ops keeps for a committed operation (as the SQLite queue does: the item is rebuilt on a retry). */
const COMMITTED_RECEIPT = JSON.stringify({ status: "committed" });
const UNIQUE_VIOLATION = "23505";
/** The longest a budgeted result's claim hold holds (its root counts it in milliseconds; this only ends a hold nobody ends). */
export const RESULT_HOLD_MS = 10_000;

/** Positional parameters of one statement: `p.add(v)` is "$n". */
class Params {
  readonly values: unknown[] = [];
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

export class PgWorkQueue implements WorkQueue {
  constructor(private readonly db: PgSession) {}

  async claim(workerId: string, leaseMs: number, root?: ClaimFilter): Promise<WorkItem | undefined> {
    return (await this.claimMany([workerId], leaseMs, root))[0];
  }

  async claimMany(workerIds: readonly string[], leaseMs: number, root?: ClaimFilter): Promise<WorkItem[]> {
    if (workerIds.length === 0) return [];
    return this.db.run((q) => this.claimRows(q, workerIds, leaseMs, root));
  }

  async claimItem(id: string, workerId: string, leaseMs: number): Promise<WorkItem | undefined> {
    const rows = await this.db.run((q) =>
      q<WorkRow>(
        `update work_items set state = 'leased', worker_id = $2, epoch = epoch + 1,
                               lease_expires_at = ${NOW_MS} + $3, updated_at = ${NOW_MS}
          where id = $1 and state = 'ready'
          returning *`,
        [id, workerId, leaseMs],
      ),
    );
    return rows[0] ? workFromRow(rows[0]) : undefined;
  }

  async renew(fences: readonly WorkFence[], leaseMs: number): Promise<WorkFence[]> {
    if (fences.length === 0) return [];
    const held = await this.db.run((q) =>
      q<{ id: string; worker_id: string; generation: number; epoch: number }>(
        `update work_items w set lease_expires_at = ${NOW_MS} + $5, updated_at = ${NOW_MS}
           from unnest($1::text[], $2::text[], $3::int[], $4::int[]) as f(id, worker_id, generation, epoch)
          where w.id = f.id and w.worker_id = f.worker_id and w.generation = f.generation and w.epoch = f.epoch
            and w.state = 'leased'
          returning w.id, w.worker_id, w.generation, w.epoch`,
        [fences.map((f) => f.id), fences.map((f) => f.workerId), fences.map((f) => f.generation), fences.map((f) => f.epoch), leaseMs],
      ),
    );
    const still = new Set(held.map((r) => fenceKey({ id: r.id, workerId: r.worker_id, generation: r.generation, epoch: r.epoch })));
    return fences.filter((f) => !still.has(fenceKey(f)));
  }

  async complete(fence: WorkFence, outcome: Outcome, op: Op): Promise<CompletionReceipt> {
    return (await this.commit(fence, outcome, op, undefined)).receipt;
  }

  async completeAndClaim(
    fence: WorkFence,
    outcome: Outcome,
    op: Op,
    claimNext: { leaseMs: number; root?: ClaimFilter },
  ): Promise<WorkCommitted> {
    return this.commit(fence, outcome, op, claimNext);
  }

  /** One round trip each, in order (a commit is one statement here; nothing is gained by a longer transaction). */
  async completeMany(commits: readonly WorkCommit[]): Promise<WorkCommitted[]> {
    const out: WorkCommitted[] = [];
    for (const c of commits) out.push(await this.commit(c.fence, c.outcome, c.op, c.claimNext));
    return out;
  }

  async release(fence: WorkFence, maxGenerations: number, error: ErrorInfo): Promise<WorkReceipt> {
    const giveUp = fence.generation >= maxGenerations;
    const rows = await this.db.run((q) =>
      giveUp
        ? q<WorkRow>(
            `update work_items set state = 'failed', error = $5, lease_expires_at = null, updated_at = ${NOW_MS}
              where id = $1 and worker_id = $2 and generation = $3 and epoch = $4 and state = 'leased'
              returning *`,
            [...fenceValues(fence), JSON.stringify(error)],
          )
        : q<WorkRow>(
            `update work_items set state = 'ready', generation = generation + 1, worker_id = null,
                                   lease_expires_at = null, ready_at = ${NOW_MS}, updated_at = ${NOW_MS}
              where id = $1 and worker_id = $2 and generation = $3 and epoch = $4 and state = 'leased'
              returning *`,
            fenceValues(fence),
          ),
    );
    return rows[0] ? { status: "committed", item: workFromRow(rows[0]) } : { status: "stale", item: await this.get(fence.id) };
  }

  async get(id: string): Promise<WorkItem | undefined> {
    const rows = await this.db.run((q) => q<WorkRow>("select * from work_items where id = $1", [id]));
    return rows[0] ? workFromRow(rows[0]) : undefined;
  }

  async list(rootId: RunId): Promise<WorkItem[]> {
    const rows = await this.db.run((q) => q<WorkRow>("select * from work_items where root_id = $1 order by created_at, id", [rootId]));
    return rows.map(workFromRow);
  }

  async abandon(lease: Lease): Promise<number> {
    const rows = await this.db.run((q) =>
      q<{ held: number; n: number }>(
        `with l as (select 1 from leases where run_id = $1 and holder_id = $2 and epoch = $3 and released = 0 for share),
              u as (update work_items set state = 'abandoned', lease_expires_at = null, updated_at = ${NOW_MS}
                     where root_id = $1 and root_epoch < $3 and state in ('ready', 'leased') and exists (select 1 from l)
                     returning 1)
         select (select count(*) from l)::int as held, (select count(*) from u)::int as n`,
        [lease.rootId, lease.holderId, lease.epoch],
      ),
    );
    if (!rows[0]?.held) throw new LeaseLostError(lease.rootId, lease.epoch);
    return rows[0].n;
  }

  async count(state?: WorkState): Promise<number> {
    const rows = await this.db.run((q) =>
      state === undefined
        ? q<{ n: number }>("select count(*)::int as n from work_items")
        : q<{ n: number }>("select count(*)::int as n from work_items where state = $1", [state]),
    );
    return rows[0]?.n ?? 0;
  }

  // ---------------------------------------------------------------- claims

  /**
   * Leases the oldest ready items to `workerIds` in order (one statement).
   * Unscoped, an item whose root's lease moved on is abandoned instead, in
   * the same statement; the claim then runs again for the workers left.
   */
  private async claimRows(q: PgQuery, workerIds: readonly string[], leaseMs: number, root: ClaimFilter | undefined): Promise<WorkItem[]> {
    const items: WorkItem[] = [];
    for (;;) {
      const p = new Params();
      const want = workerIds.slice(items.length);
      const sql = `with ${claimCtes(p, want, leaseMs, root, undefined)} select * from claimed`;
      const rows = await q<ClaimedRow>(sql, p.values);
      const leased = sortClaimed(rows);
      items.push(...leased);
      const abandoned = rows.some((r) => r.state === "abandoned");
      if ((root && !isHostScope(root)) || !abandoned || items.length === workerIds.length) return items;
    }
  }

  // ---------------------------------------------------------------- commits

  private async commit(
    fence: WorkFence,
    outcome: Outcome,
    op: Op,
    claimNext: { leaseMs: number; root?: ClaimFilter } | undefined,
  ): Promise<WorkCommitted> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.db.run((q) => this.commitOnce(q, fence, outcome, op, claimNext));
      } catch (err) {
        // The op id was recorded by a concurrent commit of another item: run again and see it (op_conflict).
        if ((err as { code?: string }).code !== UNIQUE_VIOLATION || attempt >= 3) throw err;
      }
    }
  }

  private async commitOnce(
    q: PgQuery,
    fence: WorkFence,
    outcome: Outcome,
    op: Op,
    claimNext: { leaseMs: number; root?: ClaimFilter } | undefined,
  ): Promise<WorkCommitted> {
    const p = new Params();
    const [id, worker, generation, epoch] = fenceValues(fence).map((v) => p.add(v));
    const opId = p.add(op.id);
    const ctes = [
      `seen as (select digest, work_id from work_ops where op_id = ${opId})`,
      `fin as (update work_items set state = ${p.add(outcome.state)}, result = ${p.add(toJson(outcome.result))},
                      error = ${p.add(outcome.error ? JSON.stringify(outcome.error) : null)},
                      lease_expires_at = null, updated_at = ${NOW_MS}
                where id = ${id} and worker_id = ${worker} and generation = ${generation} and epoch = ${epoch}
                  and state = 'leased' and not exists (select 1 from seen)
                returning id, root_id, ${BUDGETED_ON_HOST} as held)`,
      `op_row as (insert into work_ops (op_id, work_id, digest, receipt, at)
                  select ${opId}, id, ${p.add(op.digest)}, ${p.add(COMMITTED_RECEIPT)}, ${NOW_MS} from fin)`,
      // A worker host's budgeted result: no host claims more of its root until the root counted it (../fleet.ts).
      `result_hold as (insert into fleet_holds (root_id, kind, at) select root_id, 'result:' || id, ${NOW_MS} from fin where held
                       on conflict do nothing)`,
    ];
    // The hold above is not visible to this statement's own claim: that claim passes over its root itself.
    if (claimNext) ctes.push(claimCtes(p, [fence.workerId], claimNext.leaseMs, claimNext.root, "exists (select 1 from fin)", "fin"));
    // A commit's receipt names no item (CompletionReceipt): whether it committed is all `fin` says.
    const rows = await q<{ seen: OpRow | null; fin: boolean; cur: WorkRow | null; next: ClaimedRow[] | null }>(
      `with ${ctes.join(",\n")}
       select (select row_to_json(s) from seen s) as seen,
              exists (select 1 from fin) as fin,
              (select row_to_json(c) from work_items c where c.id = ${id}) as cur,
              ${claimNext ? "(select json_agg(x) from claimed x)" : "null"} as next`,
      p.values,
    );
    const r = rows[0]!;
    if (r.fin) return { receipt: { status: "committed" }, next: claimNext ? sortClaimed(r.next ?? [])[0] : undefined };
    let seen = r.seen;
    // Not committed by this call: either the op id was seen, or the fence no longer holds. A commit with the same
    // id that committed while this statement waited for the item's row makes the item look moved on: ask again.
    seen ??= (await q<OpRow>("select digest, work_id from work_ops where op_id = $1", [op.id]))[0] ?? null;
    const current = (await q<WorkRow>("select * from work_items where id = $1", [fence.id]))[0] ?? r.cur;
    if (seen) {
      if (seen.digest !== op.digest || seen.work_id !== fence.id) return { receipt: { status: "op_conflict" }, next: undefined };
      return { receipt: { status: "committed" }, next: undefined };
    }
    return { receipt: { status: "stale", item: current ? workFromRow(current) : undefined }, next: undefined };
  }
}

type ClaimedRow = WorkRow & { claim_n: number };
type OpRow = { digest: string; work_id: string };

/**
 * The CTEs of a claim, ending in `claimed` (the changed rows with their
 * worker's index, `claim_n`): lock the oldest ready rows (skipping locked
 * ones), then lease them, or (unscoped) abandon those whose root's lease is
 * stale. `gate` is an extra condition on the whole claim (completeAndClaim:
 * only after a first commit).
 */
function claimCtes(p: Params, workerIds: readonly string[], leaseMs: number, root: ClaimFilter | undefined, gate: string | undefined, committed?: string): string {
  const workers = p.add(workerIds);
  const limit = p.add(workerIds.length);
  const lease = p.add(leaseMs);
  const gated = gate ? `and ${gate}` : "";
  // A root's lease holds: at the item's epoch, released = 0, not expired (its driver stops before the expiry,
  // lease-keeper.ts, so nothing it enqueued may start any more).
  const holds = (rootId: string, epoch: string) =>
    `exists (select 1 from leases l where l.run_id = ${rootId} and l.epoch = ${epoch} and l.released = 0 and l.renewed_at + l.timeout_ms >= ${NOW_MS})`;
  if (root && !isHostScope(root)) {
    const rootId = p.add(root.rootId);
    const epoch = p.add(root.epoch);
    const queues = root.queues ? `and queue = any(${p.add(root.queues)}::text[])` : "";
    return `picked as (
        select id, row_number() over (order by ready_at, id) as n, true as live from (
          select id, ready_at from work_items w
           where state = 'ready' and root_id = ${rootId} and root_epoch = ${epoch} ${queues} and ${holds(rootId, epoch)} ${gated}
             and ${notHeld("w.root_id", ["spent", "result"], committed)}
           order by ready_at, id limit ${limit} for update skip locked) c),
      ${leaseCte(workers, lease)}`;
  }
  // A host's claim (../fleet.ts): its queues and protocol, no item of a root a claim hold of any kind holds.
  const host = root
    ? `and w.queue = any(${p.add(root.queues)}::text[]) and w.protocol = ${p.add(root.protocol)}
       and ${notHeld("w.root_id", ["paused", "spent", "result"], committed)}`
    : "";
  return `picked as (
      select id, live, row_number() over (partition by live order by ready_at, id) as n from (
        select w.id, w.ready_at, ${holds("w.root_id", "w.root_epoch")} as live from work_items w
         where w.state = 'ready' ${host} ${gated}
         order by w.ready_at, w.id limit ${limit} for update of w skip locked) c),
    ${leaseCte(workers, lease)}`;
}

/**
 * Whether a work item was committed by a worker host's worker (`…@<host id>`) for a run with a spending limit
 * (StageRequest.budgeted): its commit holds claims of its root's items (../fleet.ts, claim holds).
 */
const BUDGETED_ON_HOST = `(position('@' in worker_id) > 0 and coalesce((descriptor::jsonb)->>'budgeted', '') = 'true')`;

/**
 * No claim hold of these kinds holds the item's root (../fleet.ts): `paused`, `spent`, or `result`
 * (`result:<work id>`, for at most RESULT_HOLD_MS: a root that never counts it holds nothing for long).
 * `committed` names the commit CTE of the same statement (completeAndClaim), whose hold this statement cannot see.
 */
function notHeld(rootId: string, kinds: readonly ("paused" | "spent" | "result")[], committed: string | undefined): string {
  const fixed = kinds.filter((k) => k !== "result").map((k) => `'${k}'`);
  const conds = [
    ...(fixed.length ? [`h.kind in (${fixed.join(", ")})`] : []),
    ...(kinds.includes("result") ? [`(h.kind like 'result:%' and h.at > ${NOW_MS} - ${RESULT_HOLD_MS})`] : []),
  ];
  const own = committed ? ` and not exists (select 1 from ${committed} f where f.held and f.root_id = ${rootId})` : "";
  return `not exists (select 1 from fleet_holds h where h.root_id = ${rootId} and (${conds.join(" or ")}))${own}`;
}

/** Leases the picked live rows (the n-th to the n-th worker); abandons the others. */
function leaseCte(workers: string, lease: string): string {
  return `claimed as (
      update work_items w set
        state = case when p.live then 'leased' else 'abandoned' end,
        worker_id = case when p.live then (${workers}::text[])[p.n] else w.worker_id end,
        epoch = case when p.live then w.epoch + 1 else w.epoch end,
        lease_expires_at = case when p.live then ${NOW_MS} + ${lease} else null end,
        updated_at = ${NOW_MS}
      from picked p where w.id = p.id
      returning w.*, p.n as claim_n)`;
}

/** The leased rows of a claim, in their workers' order. */
function sortClaimed(rows: readonly ClaimedRow[]): WorkItem[] {
  return rows
    .filter((r) => r.state === "leased")
    .sort((a, b) => a.claim_n - b.claim_n)
    .map(workFromRow);
}

function fenceValues(f: WorkFence): [string, string, number, number] {
  return [f.id, f.workerId, f.generation, f.epoch];
}

function fenceKey(f: WorkFence): string {
  return JSON.stringify([f.id, f.workerId, f.generation, f.epoch]);
}
