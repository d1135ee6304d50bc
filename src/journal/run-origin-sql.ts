/**
 * The SQL of the origin filter (./run-origin.ts says what each origin
 * selects), the same on both backends but for how a field of a JSON text
 * column is read (JsonField: json_extract on SQLite, #>> on Postgres).
 * `recovery` reads each candidate run's events through the events' primary
 * key (run id, seq); the other origins read one event per run, its first.
 */

import { sql, type RawBuilder } from "kysely";
import { SCHEDULED_ID_PREFIX, type RunOriginFilter } from "./run-origin.ts";

/** The SQL text of a JSON text column's field at `path` (null when absent): json_extract on SQLite, #>> on Postgres. */
export type JsonField = (column: string, path: readonly string[]) => RawBuilder<unknown>;

/** The condition (on `runs`) that selects the runs of one origin. */
export function originCondition(origin: RunOriginFilter, field: JsonField): RawBuilder<boolean> {
  if (origin === "recovery") {
    return sql<boolean>`exists (select 1 from events r join events p on p.run_id = r.run_id and p.seq = r.seq - 1
      where r.run_id = runs.id and r.type = 'run_resumed' and ${field("r.payload", ["drivenBy"])} = 'service'
        and p.type not in ('run_started', 'run_resumed') and ${field("p.payload", ["reusedFrom"])} is null)`;
  }
  const kind = field("s.payload", ["origin", "kind"]);
  const startedBy = field("s.payload", ["startedBy"]);
  const noOrigin = sql`${field("s.payload", ["origin"])} is null`;
  const cond =
    origin === "rerun" || origin === "fork"
      ? sql`${kind} = ${origin}`
      : origin === "schedule"
        ? sql`${noOrigin} and (${startedBy} = 'schedule' or (${startedBy} is null and substr(runs.id, 1, ${SCHEDULED_ID_PREFIX.length}) = ${SCHEDULED_ID_PREFIX}))`
        : sql`${noOrigin} and ${startedBy} = ${origin}`;
  return sql<boolean>`exists (select 1 from events s where s.run_id = runs.id and s.seq = 1 and s.type = 'run_started' and ${cond})`;
}
