/** The journal's counters on SQLite (the contract: ../counters.ts): `meta` rows, an add is one upsert. */

import type { Database, Statement } from "bun:sqlite";
import { COUNTERS, counterKey, countersFrom, type CounterName, type JournalCounters } from "../counters.ts";

export class SqliteCounters implements JournalCounters {
  private readonly upsert: Statement<unknown, [string, string]>;
  private readonly rows: Statement<{ key: string; value: string }, [string]>;

  constructor(
    db: Database,
    private readonly guard: <T>(fn: () => T) => Promise<T>,
  ) {
    this.upsert = db.prepare("insert into meta (key, value) values (?, ?) on conflict (key) do update set value = cast(cast(value as integer) + cast(excluded.value as integer) as text)");
    this.rows = db.prepare("select key, value from meta where key in (select value from json_each(?))");
  }

  add(name: CounterName, n: number): Promise<void> {
    return this.guard(() => {
      this.upsert.run(counterKey(name), String(n));
    });
  }

  read(): Promise<Record<CounterName, number>> {
    return this.guard(() => countersFrom(this.rows.all(JSON.stringify(COUNTERS.map(counterKey)))));
  }
}
