/**
 * Reads of the Postgres journal: a run by id, the replay path and the
 * status views as prepared statements (hot, and one shape each). Run
 * listings go through Kysely, in a bundle of their own (pg-listings.ts).
 *
 * Views (JournalViews in ../views.ts): stage tallies come from the stage
 * index by root (stage_index_by_path, root first), changes from the runs'
 * change numbers (runs_by_change). Change numbers are handed out by the
 * change clock whose row lock orders them by commit (append-sql.ts), so a
 * reader paging from its cursor never skips a change committed later with
 * a lower number. A run deleted by retention leaves a tombstone numbered by
 * the same clock (retention.ts): read with the runs, as a `deleted` change.
 */

import type { RunId } from "../../shared/ids.ts";
import type { JournalEvent, RunRecord } from "../runs.ts";
import type { JournalViews, RunChange, StageTally } from "../views.ts";
import { runFromRow, type RunsTable } from "../sqlite/tables.ts";
import { changeFromRow, tallyFromRow, type ChangeRow, type TallyRow } from "../sqlite/views.ts";
import type { PgConnection } from "./connection.ts";

/** One run by id, a prepared statement (every resume and control poll reads it; Kysely stays unloaded). */
export async function getRun(conn: PgConnection, id: RunId): Promise<RunRecord | undefined> {
  const rows = await conn.query<RunsTable>("select * from runs where id = $1", [id], "run-by-id");
  return rows[0] ? runFromRow(rows[0]) : undefined;
}

/** Events of `runId` with seq > afterSeq, ascending, at most `limit` (all when undefined). */
/**
 * A run's events after `afterSeq`, as one JSON text the server builds (an
 * array of [seq, type, key, idempotency key, at, payload?], the payload
 * left out when it is NULL, i.e. undefined) and one JSON.parse here: the
 * stored payloads are JSON texts already and go in as they are. Measured on
 * 1,000 events of a resume: 3 to 6 ms, against 7 to 9 ms as rows, whose
 * fields pg decodes one by one in JavaScript (and colder in a process that
 * just started, as a resume is).
 */
const EVENTS_SQL = `select '[' || coalesce(string_agg('[' || seq || ',' || to_json(type) || ',' || coalesce(to_json(key)::text, 'null') || ','
                                                || coalesce(to_json(idempotency_key)::text, 'null') || ',' || at || coalesce(',' || payload, '') || ']', ',' order by seq), '') || ']' as events
                      from (select * from events where run_id = $1 and seq > $2 order by seq limit $3) e`;

type EventTuple = [number, string, string | null, string | null, number, unknown?];

export async function readEvents(conn: PgConnection, runId: RunId, afterSeq = 0, limit?: number): Promise<JournalEvent[]> {
  const rows = await conn.query<{ events: string }>(EVENTS_SQL, [runId, afterSeq, limit ?? null], "events-after");
  const tuples = JSON.parse(rows[0]!.events) as EventTuple[];
  const events = new Array<JournalEvent>(tuples.length);
  for (let i = 0; i < tuples.length; i++) {
    const t = tuples[i]!;
    events[i] = { runId, seq: t[0], type: t[1], key: t[2], idempotencyKey: t[3], payload: t.length > 5 ? t[5] : undefined, at: t[4] };
  }
  return events;
}

export class PgViews implements JournalViews {
  constructor(private readonly conn: PgConnection) {}

  async stageTallies(rootIds: readonly RunId[]): Promise<StageTally[]> {
    if (rootIds.length === 0) return [];
    const rows = await this.conn.query<TallyRow>(
      `select s.root_id, r.status as run_status, s.state, s.outcome, count(*) as stages,
              sum(s.input_tokens) as i, sum(s.output_tokens) as o, sum(s.cache_read_tokens) as cr,
              sum(s.cache_write_tokens) as cw, sum(s.cost_micro_usd) as c, sum(s.turns) as t, max(s.has_usage) as has_usage
         from stage_index s join runs r on r.id = s.run_id
        where s.root_id = any($1::text[]) and s.kind = 'stage'
        group by s.root_id, r.status, s.state, s.outcome`,
      [rootIds],
      "stage-tallies",
    );
    return rows.map(tallyFromRow);
  }

  async changesSince(afterChange: number, limit: number): Promise<RunChange[]> {
    const rows = await this.conn.query<ChangeRow>(
      `select id, root_id, parent_id, status, last_seq, change_seq, false as deleted from runs where change_seq > $1
       union all
       select id, root_id, parent_id, status, last_seq, change_seq, true as deleted from run_tombstones where change_seq > $1
       order by change_seq limit $2`,
      [afterChange, limit],
      "changes-since-with-tombstones",
    );
    return rows.map(changeFromRow);
  }
}
