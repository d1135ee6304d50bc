/**
 * The journal backends the conformance suite runs against. Each test file
 * loops over `BACKENDS` and names its tests `${backend.name}: ...`.
 *
 * `ATOMIC_TEST_BACKENDS=sqlite` (comma-separated) restricts the list; a
 * name that matches no backend fails loudly rather than running nothing.
 *
 * Hooks a backend may lack (`tamperSchemaVersion`, `file`) let the suite
 * test behaviour that needs access below the Journal interface; tests that
 * need them are skipped for backends without them.
 */

import { Database } from "bun:sqlite";
import { join } from "node:path";
import { JOURNAL_FILE, openJournal } from "../../src/journal/open.ts";
import type { Durability, Journal } from "../../src/journal/types.ts";

export interface Backend {
  name: string;
  /** Opens (creating if needed) the journal that lives in `dir`. */
  open(dir: string, durability?: Durability): Promise<Journal>;
  /** The journal's file, for backends that have one. */
  file?(dir: string): string;
  /** Overwrites the stored schema version (the journal must be closed). */
  tamperSchemaVersion?(dir: string, version: number): void;
  /** Reads the stored schema version without going through the journal. */
  readSchemaVersion?(dir: string): number;
}

const sqlite: Backend = {
  name: "sqlite",
  open: (dir, durability = "full") => openJournal({ home: dir, durability }),
  file: (dir) => join(dir, JOURNAL_FILE),
  tamperSchemaVersion(dir, version) {
    const db = new Database(join(dir, JOURNAL_FILE));
    try {
      db.run("update meta set value = ? where key = 'schema_version'", [String(version)]);
    } finally {
      db.close();
    }
  },
  readSchemaVersion(dir) {
    const db = new Database(join(dir, JOURNAL_FILE), { readonly: true });
    try {
      const row = db.query<{ value: string }, []>("select value from meta where key = 'schema_version'").get();
      return Number(row?.value);
    } finally {
      db.close();
    }
  },
};

const ALL: Backend[] = [sqlite];

function selected(): Backend[] {
  const wanted = process.env.ATOMIC_TEST_BACKENDS?.split(",").map((s) => s.trim()).filter(Boolean);
  if (!wanted?.length) return ALL;
  const unknown = wanted.filter((w) => !ALL.some((b) => b.name === w));
  if (unknown.length) throw new Error(`ATOMIC_TEST_BACKENDS names unknown backends: ${unknown.join(", ")}`);
  return ALL.filter((b) => wanted.includes(b.name));
}

export const BACKENDS: readonly Backend[] = selected();
