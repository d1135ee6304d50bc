/**
 * Retention on SQLite (the contract: RunRetention in ../retention.ts).
 *
 * Deleting a tree: the run ids are found by walking down from the root
 * through `runs_by_parent` (runs has no index by root: a tree is at most
 * maxChildDepth levels deep, at most 10), then every table that refers to a run is
 * cleared by those ids or by the root id, each through an index, and the
 * runs rows go last (one statement: SQLite checks the parent references at
 * its end). One BEGIN IMMEDIATE transaction per tree, run synchronously:
 * a live run's append waits for one tree at most (milliseconds), never for
 * the whole gc. A dry run takes the same path and rolls back.
 *
 * Giving space back: a file with `auto_vacuum = incremental` (every journal
 * created since retention exists) frees its pages in short steps
 * (`incremental_vacuum(N)`, each its own transaction, so writers interleave),
 * then checkpoints the write-ahead log so the main file is truncated. A file
 * created before has `auto_vacuum = none`: SQLite can switch it only by
 * rewriting it whole (`pragma auto_vacuum = incremental; vacuum`), which
 * holds the write lock for the whole rewrite, so that happens only when the
 * caller says no run is live (`rewrite`); otherwise the free pages stay in
 * the file for later writes to reuse, and the report says so.
 */

import { statSync } from "node:fs";
import type { Database, Statement } from "bun:sqlite";
import type { RunId } from "../../shared/ids.ts";
import type { DeletedTree, ReclaimReport, RunRetention } from "../retention.ts";
import type { Lease, RunRecord, RunStatus } from "../runs.ts";
import { NEXT_CHANGE, type Statements } from "./statements.ts";
import { leaseFromRow, runFromRow, type LeasesTable, type RunsTable } from "./tables.ts";

/** Tombstones of deleted runs stay this long for status readers to see (the newest stays: it keeps change numbers going up). */
const TOMBSTONE_MS = 24 * 3_600_000;

/** Pages freed per incremental step: about 4 MB at the default page size, a few milliseconds of lock. */
const VACUUM_STEP_PAGES = 1000;

/**
 * What refers to a run, in deletion order: each statement takes the root id
 * or a JSON array of the tree's run ids, and finds its rows through an
 * index. Events go before their runs.
 */
const TREE_TABLES: readonly (readonly [table: string, by: "root" | "ids", where: string])[] = [
  ["work_items", "root", "root_id = ?"],
  ["deliveries", "root", "root_id = ?"],
  ["messages", "root", "root_id = ?"],
  ["prompts", "root", "root_id = ?"],
  ["stage_index", "root", "root_id = ?"],
  ["events", "ids", "run_id in (select value from json_each(?))"],
  ["leases", "root", "run_id = ?"],
  ["run_tags", "root", "run_id = ?"],
  ["runs", "ids", "id in (select value from json_each(?))"],
];

export class SqliteRetention implements RunRetention {
  private readonly selectRun: Statement<RunsTable, [id: string]>;
  private readonly selectLease: Statement<LeasesTable, [rootId: string]>;
  private readonly selectChildren: Statement<{ id: string }, [parentId: string]>;
  private readonly deletes: Statement<unknown, [rootOrIds: string]>[];
  private readonly tombstone: Statement<unknown, [now: number, id: string]>;

  constructor(
    private readonly db: Database,
    private readonly statements: Statements,
    private readonly location: string,
    private readonly guard: <T>(fn: () => T) => Promise<T>,
  ) {
    this.selectRun = db.prepare("select * from runs where id = ?");
    this.selectLease = db.prepare("select * from leases where run_id = ? and released = 0");
    this.selectChildren = db.prepare("select id from runs where parent_id = ? order by created_at, id");
    this.tombstone = db.prepare(
      `insert into run_tombstones (change_seq, id, root_id, parent_id, status, last_seq, deleted_at)
       select ${NEXT_CHANGE}, id, root_id, parent_id, status, last_seq, ?1 from runs where id = ?2`,
    );
    this.deletes = TREE_TABLES.map(([table, , where]) => db.prepare(`delete from ${table} where ${where}`));
  }

  async candidates(filter: { statuses: readonly RunStatus[]; before: number; afterId?: RunId; limit: number }): Promise<RunRecord[]> {
    if (filter.statuses.length === 0) return [];
    return this.guard(() =>
      this.db
        .query<RunsTable, (string | number)[]>(
          `select * from runs
            where parent_id is null and status in (${filter.statuses.map(() => "?").join(", ")})
              and coalesce(ended_at, updated_at) < ? and id > ?
            order by id limit ?`,
        )
        .all(...filter.statuses, filter.before, filter.afterId ?? "", filter.limit)
        .map(runFromRow),
    );
  }

  async deleteTree(
    rootId: RunId,
    decide: (root: RunRecord, lease: Lease | undefined) => boolean,
    opts: { dryRun?: boolean } = {},
  ): Promise<DeletedTree | undefined> {
    return this.guard(() => {
      const s = this.statements;
      s.beginImmediate();
      try {
        const deleted = this.deleteIn(rootId, decide);
        if (deleted && !opts.dryRun) s.commit.run();
        else s.rollback.run();
        return deleted;
      } catch (err) {
        if (this.db.inTransaction) s.rollback.run();
        throw err;
      }
    });
  }

  /** Inside the transaction: the tree's rows, deleted and counted (undefined: kept). */
  private deleteIn(rootId: RunId, decide: (root: RunRecord, lease: Lease | undefined) => boolean): DeletedTree | undefined {
    const row = this.selectRun.get(rootId);
    if (!row || row.parent_id !== null) return undefined;
    const leaseRow = this.selectLease.get(rootId);
    if (!decide(runFromRow(row), leaseRow ? leaseFromRow(leaseRow) : undefined)) return undefined;
    const runIds: RunId[] = [rootId];
    for (let i = 0; i < runIds.length; i++) for (const c of this.selectChildren.all(runIds[i]!)) runIds.push(c.id as RunId);
    const ids = JSON.stringify(runIds);
    // Status readers (JournalViews.changesSince) learn of each deletion in change order.
    const now = Date.now();
    for (const id of runIds) this.tombstone.run(now, id);
    const rows: Record<string, number> = {};
    TREE_TABLES.forEach(([table, by], i) => {
      const n = this.deletes[i]!.run(by === "root" ? rootId : ids).changes;
      if (n > 0) rows[table] = n;
    });
    return { runIds, rows };
  }

  async reclaim(opts: { rewrite: boolean }): Promise<ReclaimReport> {
    const bytesBefore = this.bytes();
    const mode = await this.guard(() => this.db.query<{ auto_vacuum: number }, []>("pragma auto_vacuum").get()?.auto_vacuum ?? 0);
    let note: string | undefined;
    if (mode === 2) {
      // One short transaction per step: a live run's appends go between them. Stops when a step frees nothing.
      for (let free = await this.guard(() => this.freePages()); free > 0; ) {
        await this.guard(() => this.db.query(`pragma incremental_vacuum(${VACUUM_STEP_PAGES})`).all());
        const left = await this.guard(() => this.freePages());
        if (left >= free) break;
        free = left;
      }
    } else if (mode === 0 && (await this.guard(() => this.freePages())) > 0) {
      if (opts.rewrite) {
        await this.guard(() => {
          this.db.run("pragma auto_vacuum = incremental");
          this.db.run("vacuum");
        });
      } else {
        note = "the journal file predates incremental vacuum and a run is live, so its free pages stay for later writes; a gc while no run is live shrinks it";
      }
    }
    await this.guard(() =>
      this.db
        .query("delete from run_tombstones where deleted_at < ? and change_seq < (select max(change_seq) from run_tombstones)")
        .run(Date.now() - TOMBSTONE_MS),
    );
    // The main file shrinks when the log is checkpointed; a reader's snapshot may hold part of it back (busy, not an error).
    await this.guard(() => this.db.query("pragma wal_checkpoint(truncate)").get());
    return { bytesBefore, bytesAfter: this.bytes(), ...(note ? { note } : {}) };
  }

  private freePages(): number {
    return this.db.query<{ freelist_count: number }, []>("pragma freelist_count").get()?.freelist_count ?? 0;
  }

  private bytes(): number {
    let total = 0;
    for (const file of [this.location, `${this.location}-wal`]) {
      try {
        total += statSync(file).size;
      } catch {
        // no write-ahead log right now
      }
    }
    return total;
  }

  finalize(): void {
    this.selectRun.finalize();
    this.selectLease.finalize();
    this.selectChildren.finalize();
    this.tombstone.finalize();
    for (const st of this.deletes) st.finalize();
  }
}
