/**
 * The status server's views on SQLite (the contract: JournalViews in
 * ../views.ts). Prepared statements over two indexes: the stage index by
 * root (stage_index_by_path, whose first column is the root) for stage
 * tallies, the runs by change number (runs_by_change) for what changed
 * since a reader last looked. Neither reads events.
 */

import type { Database, Statement } from "bun:sqlite";
import type { RunId } from "../../shared/ids.ts";
import type { RunStatus } from "../runs.ts";
import type { StageState } from "../stage-index.ts";
import type { JournalViews, RunChange, StageTally } from "../views.ts";

/** A row of the stage tally query (the same columns on every backend). */
export interface TallyRow {
  root_id: string;
  run_status: string;
  state: string;
  outcome: string | null;
  stages: number;
  i: number;
  o: number;
  cr: number;
  cw: number;
  c: number;
  t: number;
  has_usage: number;
}

/** A row of the changes query: a run, or a deleted run's tombstone (`deleted`: 1 or true). */
export interface ChangeRow {
  id: string;
  root_id: string;
  parent_id: string | null;
  status: string;
  last_seq: number;
  change_seq: number;
  deleted: number | boolean;
}

/** Roots per statement: a page of the run list is 50; bound parameters stay far below SQLite's limit. */
const CHUNK = 100;

export class SqliteViews implements JournalViews {
  private readonly tallies = new Map<number, Statement<TallyRow, string[]>>();
  private readonly changes: Statement<ChangeRow, [after: number, limit: number]>;

  constructor(
    private readonly db: Database,
    private readonly guard: <T>(fn: () => T) => Promise<T>,
  ) {
    this.changes = db.prepare(
      `select id, root_id, parent_id, status, last_seq, change_seq, 0 as deleted from runs where change_seq > ?1
       union all
       select id, root_id, parent_id, status, last_seq, change_seq, 1 as deleted from run_tombstones where change_seq > ?1
       order by change_seq limit ?2`,
    );
  }

  /** The tally statement for `n` roots (prepared once per size). */
  private tally(n: number): Statement<TallyRow, string[]> {
    let st = this.tallies.get(n);
    if (!st) {
      st = this.db.prepare(
        `select s.root_id, r.status as run_status, s.state, s.outcome, count(*) as stages,
                sum(s.input_tokens) as i, sum(s.output_tokens) as o, sum(s.cache_read_tokens) as cr,
                sum(s.cache_write_tokens) as cw, sum(s.cost_micro_usd) as c, sum(s.turns) as t, max(s.has_usage) as has_usage
           from stage_index s join runs r on r.id = s.run_id
          where s.root_id in (${Array.from({ length: n }, () => "?").join(", ")}) and s.kind = 'stage'
          group by s.root_id, r.status, s.state, s.outcome`,
      );
      this.tallies.set(n, st);
    }
    return st;
  }

  async stageTallies(rootIds: readonly RunId[]): Promise<StageTally[]> {
    return this.guard(() => {
      const out: StageTally[] = [];
      for (let i = 0; i < rootIds.length; i += CHUNK) {
        const ids = rootIds.slice(i, i + CHUNK);
        for (const r of this.tally(ids.length).all(...ids)) {
          out.push(tallyFromRow(r));
        }
      }
      return out;
    });
  }

  async changesSince(afterChange: number, limit: number): Promise<RunChange[]> {
    return this.guard(() =>
      this.changes.all(afterChange, limit).map(changeFromRow),
    );
  }

  finalize(): void {
    for (const st of this.tallies.values()) st.finalize();
    this.changes.finalize();
  }
}

export function tallyFromRow(r: TallyRow): StageTally {
  return {
    rootId: r.root_id as RunId,
    runStatus: r.run_status as RunStatus,
    state: r.state as StageState,
    outcome: r.outcome as StageTally["outcome"],
    stages: r.stages,
    usage: r.has_usage
      ? { inputTokens: r.i, outputTokens: r.o, cacheReadTokens: r.cr, cacheWriteTokens: r.cw, costMicroUsd: r.c, turns: r.t }
      : null,
  };
}

export function changeFromRow(r: ChangeRow): RunChange {
  return {
    id: r.id as RunId,
    rootId: r.root_id as RunId,
    parentId: r.parent_id as RunId | null,
    status: r.status as RunStatus,
    lastSeq: r.last_seq,
    change: r.change_seq,
    ...(r.deleted ? { deleted: true } : {}),
  };
}
