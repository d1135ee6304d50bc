/**
 * Schedules on Postgres (the contract: ../schedules.ts). Each operation is
 * one statement, committed on its own. The tick claim is a compare-and-set:
 * a single UPDATE whose WHERE names the cursor (and buffered tick) the
 * caller read. Of two services racing for a tick, on any hosts, the second
 * UPDATE waits on the row lock of the first and, under READ COMMITTED,
 * re-checks its WHERE against the committed row once the first commits:
 * the cursor moved, so it changes nothing and loses. No explicit lock is
 * needed beyond that row lock.
 */

import type { NewSchedule, ScheduleRecord, ScheduleStore, TickAdvance, TickState } from "../schedules.ts";
import { scheduleFromRow as fromRow, type ScheduleRow } from "../sqlite/schedules.ts";
import type { PgSession } from "./store-session.ts";


export class PgScheduleStore implements ScheduleStore {
  constructor(private readonly s: PgSession) {}

  /** One statement; how many rows it changed (RETURNING 1 per row). */
  private async changed(text: string, values: readonly unknown[]): Promise<number> {
    return (await this.s.run((q) => q(text, values))).length;
  }

  async add(s: NewSchedule): Promise<boolean> {
    const n = await this.changed(
      `insert into schedules (name, cron, timezone, workflow, inputs, cwd, overlap, catch_up, created_at, updated_at)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9) on conflict (name) do nothing returning 1`,
      [s.name, s.cron, s.timezone, s.workflow, JSON.stringify(s.inputs), s.cwd, s.overlap, s.catchUp, s.createdAt],
    );
    return n === 1;
  }

  async get(name: string): Promise<ScheduleRecord | undefined> {
    const rows = await this.s.run((q) => q<ScheduleRow>("select * from schedules where name = $1", [name]));
    return rows[0] ? fromRow(rows[0]) : undefined;
  }

  async list(): Promise<ScheduleRecord[]> {
    // Byte-wise, as SQLite orders them, whatever the database's collation.
    return (await this.s.run((q) => q<ScheduleRow>(`select * from schedules order by name collate "C"`))).map(fromRow);
  }

  async setPaused(name: string, paused: boolean, at: number): Promise<boolean> {
    return (await this.changed("update schedules set paused = $1, updated_at = $2 where name = $3 returning 1", [paused ? 1 : 0, at, name])) === 1;
  }

  async delete(name: string): Promise<boolean> {
    return (await this.changed("delete from schedules where name = $1 returning 1", [name])) === 1;
  }

  async advance(name: string, expected: TickState, change: TickAdvance, at: number): Promise<boolean> {
    const buffered = change.bufferedTickAt === undefined ? expected.bufferedTickAt : change.bufferedTickAt;
    const n = await this.changed(
      `update schedules set last_tick_at = $1, last_run_id = coalesce($2, last_run_id), buffered_tick_at = $3, updated_at = $4
        where name = $5 and last_tick_at is not distinct from $6::bigint and buffered_tick_at is not distinct from $7::bigint
        returning 1`,
      [change.lastTickAt, change.lastRunId ?? null, buffered, at, name, expected.lastTickAt, expected.bufferedTickAt],
    );
    return n === 1;
  }

  async recordRun(name: string, runId: string, at: number): Promise<void> {
    await this.changed("update schedules set last_run_id = $1, updated_at = $2 where name = $3 returning 1", [runId, at, name]);
  }
}
