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

import type { RunId } from "../shared/ids.ts";
import type { Lease, RunRecord, RunStatus } from "./runs.ts";

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

