/** The journal's counters on Postgres (the contract: ../counters.ts): `meta` rows, an add is one upsert. */

import { COUNTERS, counterKey, countersFrom, type CounterName, type JournalCounters } from "../counters.ts";
import type { PgSession } from "./store-session.ts";

export class PgCounters implements JournalCounters {
  constructor(private readonly s: PgSession) {}

  async add(name: CounterName, n: number): Promise<void> {
    await this.s.run((q) =>
      q(`insert into meta (key, value) values ($1, $2) on conflict (key) do update set value = ((meta.value)::bigint + (excluded.value)::bigint)::text`, [counterKey(name), String(n)]),
    );
  }

  async read(): Promise<Record<CounterName, number>> {
    return countersFrom(await this.s.run((q) => q<{ key: string; value: string }>(`select key, value from meta where key = any($1::text[])`, [COUNTERS.map(counterKey)])));
  }
}
