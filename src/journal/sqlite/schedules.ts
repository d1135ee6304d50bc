/**
 * Schedules on SQLite (the contract: ../schedules.ts). Each operation is one
 * prepared statement, autocommitted: the tick compare-and-set is a single
 * UPDATE whose WHERE names the cursor the caller read, so of two services
 * racing for a tick exactly one changes the row.
 */

import type { Database, Statement } from "bun:sqlite";
import type { NewSchedule, ScheduleRecord, ScheduleStore, TickAdvance, TickState } from "../schedules.ts";

/** A schedules row; the Postgres store (../postgres/schedules.ts) has the same columns and maps them with `scheduleFromRow`. */
export interface ScheduleRow {
  name: string;
  cron: string;
  timezone: string | null;
  workflow: string;
  inputs: string;
  cwd: string;
  overlap: string;
  catch_up: string;
  paused: number;
  created_at: number;
  updated_at: number;
  last_tick_at: number | null;
  last_run_id: string | null;
  buffered_tick_at: number | null;
}

type Bind = string | number | null;

export class SqliteScheduleStore implements ScheduleStore {
  private readonly insert: Statement<unknown, Bind[]>;
  private readonly one: Statement<ScheduleRow, [string]>;
  private readonly all: Statement<ScheduleRow, []>;
  private readonly pause: Statement<unknown, [number, number, string]>;
  private readonly remove: Statement<unknown, [string]>;
  private readonly cas: Statement<unknown, Bind[]>;
  private readonly ran: Statement<unknown, [string, number, string]>;

  constructor(
    db: Database,
    private readonly guard: <T>(fn: () => T) => Promise<T>,
  ) {
    this.insert = db.prepare(
      `insert into schedules (name, cron, timezone, workflow, inputs, cwd, overlap, catch_up, created_at, updated_at)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) on conflict (name) do nothing`,
    );
    this.one = db.prepare("select * from schedules where name = ?");
    this.all = db.prepare("select * from schedules order by name");
    this.pause = db.prepare("update schedules set paused = ?, updated_at = ? where name = ?");
    this.remove = db.prepare("delete from schedules where name = ?");
    this.cas = db.prepare(
      `update schedules set last_tick_at = ?, last_run_id = coalesce(?, last_run_id), buffered_tick_at = ?, updated_at = ?
        where name = ? and last_tick_at is ? and buffered_tick_at is ?`,
    );
    this.ran = db.prepare("update schedules set last_run_id = ?, updated_at = ? where name = ?");
  }

  add(s: NewSchedule): Promise<boolean> {
    return this.guard(() => {
      const r = this.insert.run(s.name, s.cron, s.timezone, s.workflow, JSON.stringify(s.inputs), s.cwd, s.overlap, s.catchUp, s.createdAt, s.createdAt);
      return r.changes === 1;
    });
  }

  get(name: string): Promise<ScheduleRecord | undefined> {
    return this.guard(() => {
      const row = this.one.get(name);
      return row ? scheduleFromRow(row) : undefined;
    });
  }

  list(): Promise<ScheduleRecord[]> {
    return this.guard(() => this.all.all().map(scheduleFromRow));
  }

  setPaused(name: string, paused: boolean, at: number): Promise<boolean> {
    return this.guard(() => this.pause.run(paused ? 1 : 0, at, name).changes === 1);
  }

  delete(name: string): Promise<boolean> {
    return this.guard(() => this.remove.run(name).changes === 1);
  }

  advance(name: string, expected: TickState, change: TickAdvance, at: number): Promise<boolean> {
    return this.guard(() => {
      const buffered = change.bufferedTickAt === undefined ? expected.bufferedTickAt : change.bufferedTickAt;
      const r = this.cas.run(change.lastTickAt, change.lastRunId ?? null, buffered, at, name, expected.lastTickAt, expected.bufferedTickAt);
      return r.changes === 1;
    });
  }

  recordRun(name: string, runId: string, at: number): Promise<void> {
    return this.guard(() => void this.ran.run(runId, at, name));
  }
}

export function scheduleFromRow(r: ScheduleRow): ScheduleRecord {
  return {
    name: r.name,
    cron: r.cron,
    timezone: r.timezone,
    workflow: r.workflow,
    inputs: JSON.parse(r.inputs) as Record<string, unknown>,
    cwd: r.cwd,
    overlap: r.overlap as ScheduleRecord["overlap"],
    catchUp: r.catch_up as ScheduleRecord["catchUp"],
    paused: r.paused === 1,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    lastTickAt: r.last_tick_at,
    lastRunId: r.last_run_id,
    bufferedTickAt: r.buffered_tick_at,
  };
}
