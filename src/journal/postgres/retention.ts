/**
 * Retention on Postgres (the contract: RunRetention in ../retention.ts).
 *
 * Deleting a tree is one transaction per root. Locks, in the order every
 * other writer of a root takes them (messages.ts, append-sql.ts), so none
 * waits on another in a cycle:
 * 1. the root's message lock (the advisory lock of messages.ts): an enqueue
 *    waiting on it then finds the run gone and refuses;
 * 2. the root's lease row FOR UPDATE: an append, a fenced write of the work
 *    queue or the message store (FOR SHARE), a renewal or a takeover
 *    (FOR UPDATE) waits for this transaction, so the lease judged here is
 *    the lease until the commit;
 * 3. the root's runs row FOR UPDATE;
 * 4. the change clock, last (reads.ts): each deleted run's tombstone gets a
 *    change number of its own, ordered by commit like every other change.
 *
 * Whether the lease is live is judged inside the transaction by the
 * database clock (leases.ts: every host judges expiry by it): a run whose
 * lease is live is kept whatever `decide` says. `decide` runs on this
 * host's clock (leaseLive with Date.now()), so the lease it is shown has
 * its renewal time moved onto this host's clock (renewedAt + this host's
 * now - the database's now): its judgement and the database's agree even
 * when the clocks differ. A dry run takes the same path and rolls back.
 *
 * Giving space back: VACUUM cannot run inside a transaction, so `reclaim`
 * runs a plain VACUUM of the tables retention deletes from, each statement
 * on its own, after the deletes committed. A plain VACUUM takes no lock
 * that blocks reads or writes: the deleted rows' space becomes reusable by
 * later writes, and the files shrink only by empty pages at their ends.
 * VACUUM FULL would give everything back but locks each table against
 * every host while it rewrites it, so gc never runs it, `rewrite` or not;
 * the note says so, and an operator may run it in a quiet moment.
 * The size reported is that of the schema's tables, indexes and TOAST data
 * (their main forks). VACUUM needs the tables' owner (the user that made
 * the journal): for another user Postgres skips them with a warning.
 * Tombstones older than a day are deleted there too (the change clock is
 * a counter, so numbers never go back without them).
 */

import type { RunId } from "../../shared/ids.ts";
import { leaseLive } from "../run-status.ts";
import { leaseFromRow, runFromRow, type LeasesTable, type RunsTable } from "../sqlite/tables.ts";
import type { DeletedTree, ReclaimReport, RunRetention } from "../retention.ts";
import type { Lease, RunRecord, RunStatus } from "../runs.ts";
import type { Client, PgConnection } from "./connection.ts";
import { lockRoot } from "./messages.ts";
import { NOW_MS, type PgQuery } from "./store-session.ts";

/** Tombstones of deleted runs stay this long for status readers to see. */
const TOMBSTONE_MS = 24 * 3_600_000;

/**
 * What refers to a run, in deletion order; `$1` is the root id or the
 * tree's run ids (text[]), each found through an index. Work operations go
 * before their items (found through them: work_ops_by_work, migration 3);
 * the runs rows last, in one statement (Postgres checks the parent
 * references at its end).
 */
const TREE_TABLES: readonly (readonly [table: string, by: "root" | "ids", where: string])[] = [
  ["work_ops", "root", "work_id in (select id from work_items where root_id = $1)"],
  ["work_items", "root", "root_id = $1"],
  ["deliveries", "root", "root_id = $1"],
  ["messages", "root", "root_id = $1"],
  ["prompts", "root", "root_id = $1"],
  ["stage_index", "root", "root_id = $1"],
  ["artifact_chunks", "root", "file_id in (select id from artifact_files where root_id = $1)"],
  ["artifact_files", "root", "root_id = $1"],
  ["events", "ids", "run_id = any($1::text[])"],
  ["leases", "root", "run_id = $1"],
  ["run_tags", "root", "run_id = $1"],
  ["runs", "ids", "id = any($1::text[])"],
];

/** Thrown to roll a dry run back, carrying what it deleted. */
class DryRun {
  constructor(readonly deleted: DeletedTree) {}
}

type TreeRow = Pick<RunsTable, "id" | "root_id" | "parent_id" | "status" | "last_seq">;

export class PgRetention implements RunRetention {
  constructor(private readonly conn: PgConnection) {}

  async candidates(filter: { statuses: readonly RunStatus[]; before: number; afterId?: RunId; limit: number }): Promise<RunRecord[]> {
    if (filter.statuses.length === 0) return [];
    const rows = await this.conn.query<RunsTable>(
      `select * from runs
        where parent_id is null and status = any($1::text[]) and coalesce(ended_at, updated_at) < $2 and id collate "C" > $3
        order by id collate "C" limit $4`,
      [[...filter.statuses], filter.before, filter.afterId ?? "", filter.limit],
      "retention-candidates",
    );
    return rows.map(runFromRow);
  }

  async deleteTree(
    rootId: RunId,
    decide: (root: RunRecord, lease: Lease | undefined) => boolean,
    opts: { dryRun?: boolean } = {},
  ): Promise<DeletedTree | undefined> {
    try {
      return await this.conn.transaction(async (c) => {
        const deleted = await deleteIn(c, rootId, decide);
        if (deleted && opts.dryRun) throw new DryRun(deleted);
        return deleted;
      });
    } catch (err) {
      if (err instanceof DryRun) return err.deleted;
      throw err;
    }
  }

  async reclaim(_opts: { rewrite: boolean }): Promise<ReclaimReport> {
    const bytesBefore = await this.bytes();
    await this.conn.query("delete from run_tombstones where deleted_at < $1", [Date.now() - TOMBSTONE_MS]);
    await this.conn.withClient(async (c) => {
      // One statement per table, outside any transaction (VACUUM refuses to run in one).
      for (const [table] of TREE_TABLES) await c.query(`vacuum (skip_locked) ${table}`);
      await c.query("vacuum (skip_locked) run_tombstones");
    });
    const bytesAfter = await this.bytes();
    return {
      bytesBefore,
      bytesAfter,
      measured: "journal tables",
      ...(bytesAfter < bytesBefore
        ? {}
        : {
            note: "Postgres keeps the deleted rows' space in the journal's tables for later writes (gc ran VACUUM); VACUUM FULL gives it back to the file system but locks each table against every host while it runs, so gc leaves it to you",
          }),
    };
  }

  /** The main forks of the schema's tables, their indexes and TOAST tables, in bytes. */
  private async bytes(): Promise<number> {
    const rows = await this.conn.query<{ bytes: number }>(
      `select coalesce(sum(pg_relation_size(c.oid)), 0) + coalesce(sum(pg_relation_size(nullif(c.reltoastrelid, 0))), 0) as bytes
         from pg_class c where c.relnamespace = current_schema()::regnamespace and c.relkind in ('r', 'i')`,
    );
    return rows[0]?.bytes ?? 0;
  }
}

/** Inside the transaction: the tree's rows, locked (file note), judged, deleted and counted (undefined: kept). */
async function deleteIn(c: Client, rootId: RunId, decide: (root: RunRecord, lease: Lease | undefined) => boolean): Promise<DeletedTree | undefined> {
  const q: PgQuery = async <R,>(text: string, values: readonly unknown[] = []) => (await c.query(text, [...values])).rows as R[];
  await lockRoot(q, rootId);
  const leaseRow = (await q<LeasesTable>("select * from leases where run_id = $1 for update", [rootId]))[0];
  const row = (await q<RunsTable & { now: number }>(`select *, ${NOW_MS} as now from runs where id = $1 for update`, [rootId]))[0];
  if (!row || row.parent_id !== null) return undefined;
  const lease = leaseRow && leaseRow.released === 0 ? leaseFromRow(leaseRow) : undefined;
  const shown = lease ? { ...lease, renewedAt: lease.renewedAt + (Date.now() - row.now) } : undefined;
  if (!decide(runFromRow(row), shown) || leaseLive(lease, row.now)) return undefined;
  const tree = await q<TreeRow>(
    `with recursive t (id, depth) as (
       select id, 0 from runs where id = $1
       union all select r.id, t.depth + 1 from runs r join t on r.parent_id = t.id)
     select r.id, r.root_id, r.parent_id, r.status, r.last_seq from t join runs r on r.id = t.id
      order by t.depth, r.created_at, r.id collate "C"`,
    [rootId],
  );
  const runIds = tree.map((r) => r.id as RunId);
  const rows: Record<string, number> = {};
  for (const [table, by, where] of TREE_TABLES) {
    const n = (await c.query(`delete from ${table} where ${where}`, [by === "root" ? rootId : runIds])).rowCount ?? 0;
    if (n > 0) rows[table] = n;
  }
  // Status readers (JournalViews.changesSince) learn of each deletion in change order; the clock's row lock goes last.
  await c.query(
    `with clock as (update change_clock set n = n + $1 where id = 1 returning n)
     insert into run_tombstones (change_seq, id, root_id, parent_id, status, last_seq, deleted_at)
     select clock.n - $1 + t.ord, t.id, t.root_id, t.parent_id, t.status, t.last_seq, ${NOW_MS}
       from clock, unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[]) with ordinality as t (id, root_id, parent_id, status, last_seq, ord)`,
    [tree.length, runIds, tree.map((r) => r.root_id), tree.map((r) => r.parent_id), tree.map((r) => r.status), tree.map((r) => r.last_seq)],
  );
  return { runIds, rows };
}
