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

export async function listRuns(db: Db, filter: ListRunsFilter = {}): Promise<RunRecord[]> {
  let q = filtered(db, filter).selectAll().orderBy("created_at", "desc").orderBy("id", "desc");
  if (filter.limit !== undefined) q = q.limit(filter.limit);
  if (filter.offset !== undefined) q = q.limit(filter.limit ?? -1).offset(filter.offset);
  return (await q.execute()).map(runFromRow);
}

export async function countRuns(db: Db, filter: ListRunsFilter = {}): Promise<number> {
  const row = await filtered(db, filter)
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/**
 * The runs a filter selects. `rootsOnly` defaults to true, except when
 * `parentId` asks for children (which are never roots).
 */
function filtered(db: Db, filter: ListRunsFilter) {
  let q = db.selectFrom("runs");
  if (filter.parentId !== undefined) q = q.where("parent_id", "=", filter.parentId);
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
