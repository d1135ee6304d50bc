/** Run tags on SQLite (the contract: ../tags.ts): prepared statements; a set is one transaction. */

import type { Database, Statement } from "bun:sqlite";
import type { RunId } from "../../shared/ids.ts";
import type { RunTagStore } from "../tags.ts";

export class SqliteTagStore implements RunTagStore {
  private readonly upsert: Statement<unknown, [string, string, string, number]>;
  private readonly ofRuns: Statement<{ run_id: string; key: string; value: string }, [string]>;

  constructor(
    private readonly db: Database,
    private readonly guard: <T>(fn: () => T) => Promise<T>,
  ) {
    this.upsert = db.prepare(
      "insert into run_tags (run_id, key, value, set_at) values (?, ?, ?, ?) on conflict (run_id, key) do update set value = excluded.value, set_at = excluded.set_at",
    );
    this.ofRuns = db.prepare("select run_id, key, value from run_tags where run_id in (select value from json_each(?)) order by run_id, key");
  }

  set(runId: RunId, tags: Readonly<Record<string, string>>, at: number): Promise<void> {
    return this.guard(() => {
      this.db.transaction(() => {
        for (const [key, value] of Object.entries(tags)) this.upsert.run(runId, key, value, at);
      })();
    });
  }

  of(runIds: readonly RunId[]): Promise<Map<RunId, Record<string, string>>> {
    return this.guard(() => {
      const out = new Map<RunId, Record<string, string>>();
      if (runIds.length === 0) return out;
      for (const row of this.ofRuns.all(JSON.stringify(runIds))) {
        const tags = out.get(row.run_id as RunId) ?? {};
        tags[row.key] = row.value;
        out.set(row.run_id as RunId, tags);
      }
      return out;
    });
  }
}
