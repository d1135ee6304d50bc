/**
 * Run listings of the SQLite journal, through Kysely: single statements
 * outside any transaction, each seeing the last committed state. Loaded
 * with the Kysely layer (kysely-layer.ts), on first use. The replay path
 * bypasses Kysely: event-reads.ts, and so does a lookup of one run by id
 * (statements.ts selectRun).
 */

import { sql, type Kysely } from "kysely";
import type { ListRunsFilter } from "../journal.ts";
import type { RunRecord } from "../runs.ts";
import { originCondition } from "../run-origin-sql.ts";
import { likePattern, SEARCHED_COLUMNS, searchNeedles } from "../run-search.ts";
import { runFromRow, type JournalTables } from "./tables.ts";

type Db = Kysely<JournalTables>;

/** Runs whose id starts with `prefix`, newest first. LIKE wildcards in the prefix match literally. */
export async function findRuns(db: Db, prefix: string, limit: number): Promise<RunRecord[]> {
  const pattern = `${prefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
  const rows = await db
    .selectFrom("runs")
    .selectAll()
    .where(sql<boolean>`id like ${pattern} escape '\\'`)
    .orderBy("created_at", "desc")
    .orderBy("id", "desc")
    .limit(limit)
    .execute();
  return rows.map(runFromRow);
}

/**
 * The newest roots a text search looks through by date before it reads the
 * whole table instead (listRuns).
 */
const SEARCH_PROBE_ROOTS = 2_000;

/**
 * A page of runs, newest first. A text search over the roots (no index
 * serves `%text%`) is read in one of two ways, as SQLite alone would not
 * choose them:
 * - the newest 2,000 roots, walked by date: enough when they hold the
 *   page (a text many runs hold), or when there are no more roots;
 * - else one pass over the table in its own order, sorting only the keys
 *   of the runs it finds, then the page's rows read by id. Left to itself
 *   SQLite walks the roots' index by date and looks each run up from
 *   there until the page is full: for a rare text a lookup of every one
 *   of 100,000 runs, twice the time of one pass over the table
 *   (journal/run-search.ts has the figures).
 */
export async function listRuns(db: Db, filter: ListRunsFilter = {}): Promise<RunRecord[]> {
  const page = <Q extends { limit(n: number): Q; offset(n: number): Q }>(q: Q): Q => {
    if (filter.offset !== undefined) return q.limit(filter.limit ?? -1).offset(filter.offset);
    return filter.limit !== undefined ? q.limit(filter.limit) : q;
  };
  const newestFirst = (scan: boolean) => filtered(db, filter, scan).orderBy("created_at", "desc").orderBy("id", "desc");
  if (!searchesRoots(filter)) return (await page(newestFirst(false)).selectAll().execute()).map(runFromRow);
  const wanted = filter.limit === undefined ? undefined : filter.limit + (filter.offset ?? 0);
  const edge = await db.selectFrom("runs").select("created_at").where("parent_id", "is", null).orderBy("created_at", "desc").orderBy("id", "desc").offset(SEARCH_PROBE_ROOTS - 1).limit(1).executeTakeFirst();
  if (wanted !== undefined || !edge) {
    // Every root at or after the edge's time comes before all older ones: if they hold the page, it is the page.
    const newest = edge ? newestFirst(false).where("created_at", ">=", edge.created_at) : newestFirst(false);
    const rows = await page(newest).selectAll().execute();
    if (!edge || rows.length === filter.limit) return rows.map(runFromRow);
  }
  const keys = page(newestFirst(true)).select("id");
  return (await db.selectFrom("runs").selectAll().where("id", "in", keys).orderBy("created_at", "desc").orderBy("id", "desc").execute()).map(runFromRow);
}

/** Whether a listing searches the roots for a text (and is better read by one pass over the table: listRuns). */
function searchesRoots(filter: ListRunsFilter): boolean {
  return filter.parentId === undefined && (filter.rootsOnly ?? true) && filter.text !== undefined && searchNeedles(filter.text) !== undefined;
}

export async function countRuns(db: Db, filter: ListRunsFilter = {}): Promise<number> {
  const row = await filtered(db, filter)
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/**
 * The runs a filter selects. `rootsOnly` defaults to true, except when
 * `parentId` asks for children (which are never roots). `tableScan`: the
 * roots' indexes are not used (listRuns says when).
 */
function filtered(db: Db, filter: ListRunsFilter, tableScan = false) {
  let q = db.selectFrom("runs");
  if (filter.parentId !== undefined) q = q.where("parent_id", "=", filter.parentId);
  // `+parent_id`: the same test, which the roots' partial indexes do not match, so SQLite reads the table itself
  else if (tableScan) q = q.where(sql<boolean>`+${sql.ref("parent_id")} is null`);
  else if (filter.rootsOnly ?? true) q = q.where("parent_id", "is", null);
  if (filter.status !== undefined) q = q.where("status", "=", filter.status);
  if (filter.statuses !== undefined) q = q.where("status", "in", filter.statuses.length ? [...filter.statuses] : ["-"]);
  if (filter.workflowName !== undefined) q = q.where("workflow_name", "=", filter.workflowName);
  if (filter.createdSince !== undefined) q = q.where("created_at", ">=", filter.createdSince);
  if (filter.createdBefore !== undefined) q = q.where("created_at", "<", filter.createdBefore);
  const needles = filter.text === undefined ? undefined : searchNeedles(filter.text);
  if (needles) {
    const has = (column: string, needle: string) => sql<boolean>`${sql.ref(`runs.${column}`)} like ${likePattern(needle)} escape '\\'`;
    const plain = SEARCHED_COLUMNS.plain.map((c) => has(c, needles.plain));
    const json = SEARCHED_COLUMNS.json.map((c) => has(c, needles.json));
    q = q.where(({ or }) => or([...plain, ...json]));
  }
  if (filter.origin !== undefined) q = q.where(sql<boolean>`${sql.raw(originCondition(filter.origin))}`);
  for (const [key, value] of Object.entries(filter.tags ?? {})) {
    q = q.where(({ exists, selectFrom }) =>
      exists(selectFrom("run_tags").select("run_tags.run_id").whereRef("run_tags.run_id", "=", "runs.id").where("run_tags.key", "=", key).where("run_tags.value", "=", value)),
    );
  }
  return q;
}
