/**
 * The artifact store in the journal's Postgres (the contract:
 * ../../artifacts/store.ts), over the journal's own connection pool
 * (store-session.ts), in the tables of migration 7:
 *
 * - `artifact_files`: one row per file: its key, `size` (bytes ever
 *   appended), `dropped` (bytes cut from the head by the cap), `complete`.
 * - `artifact_chunks`: the bytes, in chunks of CHUNK_BYTES at offsets that
 *   are multiples of it (`off`); only the last chunk of a file is partial.
 *
 * An append is one transaction: the file's row is made if missing and
 * locked (FOR UPDATE), so appends to one file run one after the other; the
 * part of the bytes below `size` is skipped (a retry after a lost COMMIT
 * sends the same range again and changes nothing); the rest fills the last
 * chunk (`data || $bytes`) and then new ones; when the stored bytes pass
 * the cap, whole chunks at the head go (at most the cap stays, and never
 * the last chunk: the cap is at least one chunk). Progress-only writes:
 * committed with synchronous_commit off, as the journal commits progress
 * records. A crash of the server may lose the last appends (seen here with
 * `pg_ctl stop -m immediate`); the shipper's next
 * append is then past the size and refused as a gap, and it sends the lost
 * bytes again from the store's size (../../artifacts/shipper.ts). Once
 * any later commit is durable (the stage's result, committed synchronously
 * after the shipper stopped), WAL order makes these durable too.
 *
 * Retention deletes a tree's files in its own transaction (retention.ts,
 * by root id); `deleteRun` is for callers outside it.
 */

import { CHUNK_BYTES, capFor, checkKey, gapError, type ArtifactChunk, type ArtifactFileInfo, type ArtifactKey, type ArtifactStore } from "../../artifacts/store.ts";
import { NOW_MS, type PgQuery, type PgSession } from "./store-session.ts";

interface FileRow {
  id: number;
  name: string;
  size: number;
  dropped: number;
  complete: number;
}

export class PgArtifactStore implements ArtifactStore {
  readonly kind = "postgres";
  /** Retention deletes a tree's files in the tree's own transaction (retention.ts). */
  readonly deletedWithRuns = true;
  readonly maxFileBytes: number;

  constructor(
    private readonly db: PgSession,
    readonly location: string,
    maxFileBytes: number,
  ) {
    this.maxFileBytes = capFor(maxFileBytes);
  }

  async append(key: ArtifactKey, name: string, offset: number, data: Uint8Array): Promise<number> {
    checkKey(key, name);
    return this.db.transaction(async (q) => {
      await q("set local synchronous_commit = off");
      await q(
        `insert into artifact_files (root_id, run_id, stage, name, updated_at) values ($1, $2, $3, $4, ${NOW_MS})
         on conflict (run_id, stage, name) do nothing`,
        [key.rootId, key.runId, key.stage, name],
      );
      const file = (await q<FileRow>("select id, size, dropped from artifact_files where run_id = $1 and stage = $2 and name = $3 for update", [key.runId, key.stage, name]))[0]!;
      if (offset > file.size) throw gapError(key, name, offset, file.size);
      const skip = file.size - offset;
      if (skip >= data.length) return file.size;
      let pos = file.size;
      let rest = data.subarray(skip);
      while (rest.length > 0) {
        const chunkStart = pos - (pos % CHUNK_BYTES);
        const piece = rest.subarray(0, chunkStart + CHUNK_BYTES - pos);
        if (pos > chunkStart) {
          await q("update artifact_chunks set data = data || $3 where file_id = $1 and off = $2", [file.id, chunkStart, piece]);
        } else {
          await q("insert into artifact_chunks (file_id, off, data) values ($1, $2, $3)", [file.id, chunkStart, piece]);
        }
        pos += piece.length;
        rest = rest.subarray(piece.length);
      }
      const dropped = pos - file.dropped > this.maxFileBytes ? Math.max(file.dropped, Math.ceil((pos - this.maxFileBytes) / CHUNK_BYTES) * CHUNK_BYTES) : file.dropped;
      if (dropped > file.dropped) await q("delete from artifact_chunks where file_id = $1 and off < $2", [file.id, dropped]);
      await q(`update artifact_files set size = $2, dropped = $3, updated_at = ${NOW_MS} where id = $1`, [file.id, pos, dropped]);
      return pos;
    });
  }

  async read(key: ArtifactKey, name: string, offset: number, max: number): Promise<ArtifactChunk | undefined> {
    checkKey(key, name);
    // One snapshot for the row and its chunks: a cap that drops chunks between two reads cannot tear this one.
    return this.db.transaction(async (q) => {
      await q("set transaction isolation level repeatable read, read only");
      const file = (await q<FileRow>("select id, name, size, dropped, complete from artifact_files where run_id = $1 and stage = $2 and name = $3", [key.runId, key.stage, name]))[0];
      if (!file) return undefined;
      const from = Math.min(Math.max(offset, file.dropped), file.size);
      const until = Math.min(file.size, from + Math.max(0, max));
      let data: Uint8Array = new Uint8Array(0);
      if (until > from) {
        const first = from - (from % CHUNK_BYTES);
        const rows = await q<{ off: number; data: Buffer }>("select off, data from artifact_chunks where file_id = $1 and off >= $2 and off < $3 order by off", [file.id, first, until]);
        const joined = Buffer.concat(rows.map((r) => r.data));
        data = joined.subarray(from - first, until - first);
      }
      return { ...info(file), offset: from, data };
    });
  }

  async list(key: ArtifactKey): Promise<ArtifactFileInfo[]> {
    checkKey(key);
    const rows = await this.db.run((q) => q<FileRow>("select name, size, dropped, complete from artifact_files where run_id = $1 and stage = $2 order by name", [key.runId, key.stage]));
    return rows.map(info);
  }

  async complete(key: ArtifactKey, name: string): Promise<void> {
    checkKey(key, name);
    await this.db.run((q) => q(`update artifact_files set complete = 1, updated_at = ${NOW_MS} where run_id = $1 and stage = $2 and name = $3`, [key.runId, key.stage, name]));
  }

  async deleteRun(rootId: string, runId: string, opts: { dryRun?: boolean } = {}): Promise<{ files: number; bytes: number }> {
    const where = "root_id = $1 and run_id = $2";
    const rows = await this.db.transaction((q) =>
      opts.dryRun ? q<FileRow>(`select id, name, size, dropped, complete from artifact_files where ${where}`, [rootId, runId]) : deleteFiles(q, where, [rootId, runId]),
    );
    return { files: rows.length, bytes: rows.reduce((n, f) => n + f.size - f.dropped, 0) };
  }

  /** The journal owns the connection. */
  async close(): Promise<void> {}
}

/** Deletes the files `where` selects with their chunks; the deleted rows. */
async function deleteFiles(q: PgQuery, where: string, values: unknown[]): Promise<FileRow[]> {
  await q(`delete from artifact_chunks where file_id in (select id from artifact_files where ${where})`, values);
  return q<FileRow>(`delete from artifact_files where ${where} returning id, name, size, dropped, complete`, values);
}

function info(row: FileRow): ArtifactFileInfo {
  return { name: row.name, size: row.size, dropped: row.dropped, complete: row.complete === 1 };
}
