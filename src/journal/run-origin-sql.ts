/**
 * The origin of each run, stored on its `runs` row (./run-origin.ts says
 * what each origin means): `origin`, how the run was started (schedule,
 * api, cli, rerun, fork, or null when nothing recorded says), and
 * `recovered` (0/1), whether the service ever recovered it. Both are set
 * by the database itself, by triggers on `events` that read the event just
 * inserted: a run's `run_started` (seq 1) sets `origin`, a `run_resumed`
 * of the service whose previous event was not a start nor a copied result
 * sets `recovered`. Triggers, not the append code, so that every writer of
 * a journal sets them, an older binary still running while a newer one
 * migrated the home included, and both backends' append paths (the
 * Postgres one is a database function) stay as they are. The migration
 * that adds the columns fills them for the runs already recorded from
 * their events, with the same expressions.
 *
 * The run list's origin filter and its ORIGIN column read the columns,
 * through the indexes the migration makes (roots by origin, recovered
 * roots), so a search by origin costs what a search by status does,
 * whatever the number of runs (bench/status-100k.ts).
 *
 * The SQL is the same on both backends but for how a field of a JSON text
 * column is read (JsonField: json_extract on SQLite, #>> on Postgres).
 * What the migrations use is frozen with them (version 15 on SQLite, 16 on
 * Postgres): change it by a new migration, never in place.
 */

import { isRunOrigin, SCHEDULED_ID_PREFIX, type RunOriginFilter } from "./run-origin.ts";

/** The SQL text of a JSON text column's field at `path` (null when absent): json_extract on SQLite, #>> on Postgres. */
export type JsonText = (column: string, path: readonly string[]) => string;

/**
 * The condition (on `runs`, SQL text) that selects the runs of one origin: literals, so SQLite's partial indexes
 * serve it. Plain text, not Kysely's: the Postgres migrations import this file, and the Postgres journal's bundle
 * holds no Kysely (postgres.test.ts).
 */
export function originCondition(origin: RunOriginFilter): string {
  if (!isRunOrigin(origin)) throw new Error(`not a run origin: ${JSON.stringify(origin)}`);
  return origin === "recovery" ? "runs.recovered = 1" : `runs.origin = '${origin}'`;
}

/**
 * The start origin that a run_started's `payload` (a JSON text column) says, for the run whose id is `runId`:
 * the run it came from (`origin.kind`: rerun, fork), else how it was started (`startedBy`), else a schedule's
 * run by its id (recorded before `startedBy` was), else null.
 */
export function startOriginSql(payload: string, runId: string, field: JsonText): string {
  const kind = field(payload, ["origin", "kind"]);
  const startedBy = field(payload, ["startedBy"]);
  return `case
    when ${kind} in ('rerun', 'fork') then ${kind}
    when ${field(payload, ["origin"])} is not null then null
    when ${startedBy} in ('schedule', 'api', 'cli') then ${startedBy}
    when ${startedBy} is null and substr(${runId}, 1, ${SCHEDULED_ID_PREFIX.length}) = '${SCHEDULED_ID_PREFIX}' then 'schedule'
    else null end`;
}

/**
 * Whether the event before a service's run_resumed (run `runId`, seq `seq`) makes it a recovery: it continued what
 * another drive had started, its previous event neither the run's start, another drive's start, nor a result a
 * fork copied in (status/source.ts `recoveries` counts the same drives).
 */
export function recoveredSql(runId: string, seq: string, field: JsonText): string {
  return `exists (select 1 from events p where p.run_id = ${runId} and p.seq = ${seq} - 1
      and p.type not in ('run_started', 'run_resumed') and ${field("p.payload", ["reusedFrom"])} is null)`;
}

/** Whether a run_resumed's payload says the service drove it. */
export function drivenByServiceSql(payload: string, field: JsonText): string {
  return `${field(payload, ["drivenBy"])} = 'service'`;
}

/** json_extract of SQLite. */
export const sqliteJson: JsonText = (column, path) => `json_extract(${column}, '$.${path.join(".")}')`;
/** #>> of Postgres over a text column holding JSON. */
export const pgJson: JsonText = (column, path) => `(${column}::jsonb #>> '{${path.join(",")}}')`;
