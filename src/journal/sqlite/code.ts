/**
 * Pinned code on SQLite (the contract: ../code.ts). Each operation is a
 * prepared statement; a put is one transaction. The sweep reads which
 * stored files are manifests of remaining runs (their code versions are the
 * runs' workflow digests), keeps those and the files they name, and deletes
 * the rest stored before the cutoff.
 */

import type { Database, Statement } from "bun:sqlite";
import { keptDigests, type CodeFile, type CodeStore } from "../code.ts";

export class SqliteCodeStore implements CodeStore {
  private readonly insert: Statement<unknown, [string, Uint8Array, number]>;
  private readonly one: Statement<{ content: Uint8Array }, [string]>;
  private readonly manifests: Statement<{ digest: string; content: Uint8Array }, []>;
  private readonly old: Statement<{ digest: string }, [number]>;
  private readonly remove: Statement<unknown, [string]>;

  constructor(
    private readonly db: Database,
    private readonly guard: <T>(fn: () => T) => Promise<T>,
  ) {
    this.insert = db.prepare(
      "insert into code_files (digest, content, stored_at) values (?, ?, ?) on conflict (digest) do update set stored_at = excluded.stored_at",
    );
    this.one = db.prepare("select content from code_files where digest = ?");
    this.manifests = db.prepare("select digest, content from code_files where digest in (select workflow_digest from runs)");
    this.old = db.prepare("select digest from code_files where stored_at < ?");
    this.remove = db.prepare("delete from code_files where digest = ?");
  }

  put(files: readonly CodeFile[], at: number): Promise<void> {
    return this.guard(() => {
      this.db.transaction(() => {
        for (const f of files) this.insert.run(f.digest, f.content, at);
      })();
    });
  }

  get(digests: readonly string[]): Promise<Map<string, Uint8Array>> {
    return this.guard(() => {
      const out = new Map<string, Uint8Array>();
      for (const d of digests) {
        const row = this.one.get(d);
        if (row) out.set(d, new Uint8Array(row.content));
      }
      return out;
    });
  }

  sweep(before: number): Promise<number> {
    return this.guard(() =>
      this.db.transaction(() => {
        const kept = keptDigests(new Map(this.manifests.all().map((r) => [r.digest, r.content])));
        let n = 0;
        for (const { digest } of this.old.all(before)) {
          if (kept.has(digest)) continue;
          this.remove.run(digest);
          n++;
        }
        return n;
      })(),
    );
  }
}
