/**
 * The part of the SQLite journal that goes through Kysely: migrations and
 * run listings. A bundle of its own in the binary (shared/entry-points.ts),
 * loaded by SqliteJournal the first time it needs it: opening an
 * up-to-date journal and everything a run and its pool do use prepared
 * statements only.
 */

import type { Database } from "bun:sqlite";
import { Kysely } from "kysely";
import { BunSqliteDialect } from "./dialect.ts";
import type { JournalTables } from "./tables.ts";

export { migrate } from "./migrations.ts";
export { countRuns, findRuns, listRuns } from "./reads.ts";

export function openKysely(db: Database): Kysely<JournalTables> {
  return new Kysely<JournalTables>({ dialect: new BunSqliteDialect(db) });
}
