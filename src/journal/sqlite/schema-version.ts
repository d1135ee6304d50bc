/**
 * The journal's schema version, read and checked without Kysely: opening
 * an up-to-date journal (every command, every pool process) needs only
 * this; the migrations and the Kysely query builder they use are loaded
 * when there is something to migrate (kysely-layer.ts).
 */

import type { Database } from "bun:sqlite";
import { StorageError } from "../../shared/errors.ts";

/** The version the last of MIGRATIONS (migrations.ts) brings a journal to; a test checks they agree. */
export const LATEST_SCHEMA_VERSION = 15;

/**
 * The schema version of an open database, read without writing anything.
 * Throws StorageError for a file that is not ours.
 */
export function readSchemaVersion(db: Database, path: string): number {
  const tables = db
    .query<{ name: string }, []>("select name from sqlite_master where type = 'table' and name not like 'sqlite_%'")
    .all()
    .map((r) => r.name);
  if (tables.length === 0) return 0;
  if (!tables.includes("meta")) {
    throw new StorageError("storage_corrupt", `the journal at ${path} is not an atomic database (it holds other tables)`, {
      hint: "move it away or point --home at another directory",
    });
  }
  const row = db
    .query<{ value: string }, []>("select value from meta where key = 'schema_version'")
    .get();
  return row ? Number(row.value) : 0;
}

export function refuseIfTooNew(version: number, path: string): void {
  if (version <= LATEST_SCHEMA_VERSION) return;
  throw new StorageError(
    "schema_too_new",
    `the journal at ${path} has schema version ${version}, newer than version ${LATEST_SCHEMA_VERSION} that this atomic knows`,
    { hint: "upgrade atomic, or point --home at another directory" },
  );
}
