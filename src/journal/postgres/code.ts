/**
 * Pinned code on Postgres (the contract: ../code.ts). A put is one
 * statement over arrays (insert, or touch a digest already stored); the
 * sweep is one transaction: the manifests of remaining runs (their code
 * versions are the runs' workflow digests) keep themselves and the files
 * they name, and the rest stored before the cutoff is deleted.
 */

import { keptDigests, type CodeFile, type CodeStore } from "../code.ts";
import type { PgSession } from "./store-session.ts";

export class PgCodeStore implements CodeStore {
  constructor(private readonly s: PgSession) {}

  async put(files: readonly CodeFile[], at: number): Promise<void> {
    if (files.length === 0) return;
    await this.s.run((q) =>
      q(
        `insert into code_files (digest, content, stored_at)
           select d, c, $3 from unnest($1::text[], $2::bytea[]) as f(d, c)
         on conflict (digest) do update set stored_at = excluded.stored_at`,
        [files.map((f) => f.digest), files.map((f) => Buffer.from(f.content)), at],
      ),
    );
  }

  async get(digests: readonly string[]): Promise<Map<string, Uint8Array>> {
    if (digests.length === 0) return new Map();
    const rows = await this.s.run((q) => q<{ digest: string; content: Buffer }>("select digest, content from code_files where digest = any($1::text[])", [[...digests]]));
    return new Map(rows.map((r) => [r.digest, new Uint8Array(r.content)]));
  }

  async sweep(before: number): Promise<number> {
    return this.s.transaction(async (q) => {
      const manifests = await q<{ digest: string; content: Buffer }>("select digest, content from code_files where digest in (select workflow_digest from runs)");
      const kept = keptDigests(new Map(manifests.map((r) => [r.digest, new Uint8Array(r.content)])));
      const old = await q<{ digest: string }>("select digest from code_files where stored_at < $1", [before]);
      const gone = old.map((r) => r.digest).filter((d) => !kept.has(d));
      if (gone.length > 0) await q("delete from code_files where digest = any($1::text[]) and stored_at < $2", [gone, before]);
      return gone.length;
    });
  }
}
