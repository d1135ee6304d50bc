/**
 * The in-memory journal: the whole `Journal` contract (./journal.ts) in
 * this process's memory, gone when it is closed. `testRun`
 * (atomic/testing) drives workflows on it; the conformance suite in
 * test/conformance runs against it beside the SQLite and Postgres
 * journals.
 *
 * It is the embedded backend over an SQLite database that lives in memory
 * (`:memory:`), not a second implementation of the contract: the same
 * statements, transactions, savepoints and constraints, so what a test
 * shows of a workflow on it is what the file journal would record. What
 * differs is what a file brings: no write-ahead log, no fsync
 * (`synchronous = off`), no other process can open it, and nothing
 * survives `close()`. docs/design/testing.md says why it is not a map of
 * objects.
 */

import { MEMORY, SqliteJournal } from "./sqlite/sqlite-journal.ts";
import type { Journal } from "./journal.ts";

/** A new, empty journal in memory (its schema made); close it to free it. */
export function openMemoryJournal(): Promise<Journal> {
  return SqliteJournal.open(MEMORY, { durability: "normal" });
}
