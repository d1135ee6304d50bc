/** Run tags on Postgres (the contract: ../tags.ts): a set is one statement over arrays. */

import type { RunId } from "../../shared/ids.ts";
import type { RunTagStore } from "../tags.ts";
import type { PgSession } from "./store-session.ts";

export class PgTagStore implements RunTagStore {
  constructor(private readonly s: PgSession) {}

  async set(runId: RunId, tags: Readonly<Record<string, string>>, at: number): Promise<void> {
    const entries = Object.entries(tags);
    if (entries.length === 0) return;
    await this.s.run((q) =>
      q(
        `insert into run_tags (run_id, key, value, set_at)
           select $1, k, v, $4 from unnest($2::text[], $3::text[]) as t(k, v)
         on conflict (run_id, key) do update set value = excluded.value, set_at = excluded.set_at`,
        [runId, entries.map(([k]) => k), entries.map(([, v]) => v), at],
      ),
    );
  }

  async of(runIds: readonly RunId[]): Promise<Map<RunId, Record<string, string>>> {
    const out = new Map<RunId, Record<string, string>>();
    if (runIds.length === 0) return out;
    const rows = await this.s.run((q) =>
      q<{ run_id: string; key: string; value: string }>(`select run_id, key, value from run_tags where run_id = any($1::text[]) order by run_id, key collate "C"`, [[...runIds]]),
    );
    for (const row of rows) {
      const tags = out.get(row.run_id as RunId) ?? {};
      tags[row.key] = row.value;
      out.set(row.run_id as RunId, tags);
    }
    return out;
  }
}
