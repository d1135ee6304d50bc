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
 *
 * `memory` is the in-memory journal (src/journal/memory.ts) that testRun
 * uses; tests of a promise it does not make (another process opening it)
 * check `processLocal`.
 *
 * `postgres` runs where Postgres is installed (or scripts/test.sh started
 * the suite's cluster): each journal "directory" is a schema of its own in
 * a database this test file made in the test cluster (test/helpers/
 * postgres.ts), so tests never see each other's rows and reopening a
 * directory reopens its journal.
 */

import { test } from "bun:test";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { JOURNAL_FILE, openJournal } from "../../src/journal/open.ts";
import { openMemoryJournal } from "../../src/journal/memory.ts";
import type { Durability, Journal } from "../../src/journal/journal.ts";
import type { HolderInfo, Lease } from "../../src/journal/runs.ts";
import { Kysely, sql } from "kysely";
import { BunSqliteDialect } from "../../src/journal/sqlite/dialect.ts";
import { MIGRATIONS } from "../../src/journal/sqlite/migrations.ts";
import { newRunId, type HolderId, type RunId } from "../../src/shared/ids.ts";
import { hostId, processStartTime } from "../../src/shared/process-info.ts";
import { createHash } from "node:crypto";
import { freshDatabase, postgresInstalled } from "../helpers/postgres.ts";

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
  /** Only this process can open it (the in-memory journal): tests of two processes sharing it do not apply. */
  processLocal?: boolean;
  /** The `--journal` URL (ATOMIC_JOURNAL) that opens the journal of `dir`, for backends other processes reach by URL. */
  journalUrl?(dir: string): Promise<string>;
}

/** The embedded backend itself, for SQLite-only tests (file-level migrations), whatever ATOMIC_TEST_BACKENDS selects. */
export const sqlite: Backend = {
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

let database: Promise<string> | undefined;

/** The Postgres journal URL standing for `dir`: a schema named after it, in this test file's database. */
export async function postgresUrlFor(dir: string): Promise<string> {
  database ??= freshDatabase("conformance");
  const url = new URL(await database);
  url.searchParams.set("schema", `j_${createHash("sha256").update(dir).digest("hex").slice(0, 20)}`);
  return url.toString();
}

const postgres: Backend = {
  name: "postgres",
  open: async (dir, durability = "full") => openJournal({ home: dir, durability, journalUrl: await postgresUrlFor(dir) }),
  journalUrl: postgresUrlFor,
};

/**
 * The in-memory journal (src/journal/memory.ts). A directory stands for one journal that lives as long as this
 * test file: opening the directory again (a second process, a reopen after close) gives the same data, as a
 * file would; `close()` of a handle ends that handle only.
 */
const inMemory = new Map<string, Promise<Journal>>();
const memory: Backend = {
  name: "memory",
  processLocal: true,
  async open(dir) {
    let journal = inMemory.get(dir);
    if (!journal) inMemory.set(dir, (journal = openMemoryJournal()));
    const target = await journal;
    let closed = false;
    return new Proxy(target, {
      get(t, key) {
        if (key === "close") return async () => void (closed = true);
        if (closed && typeof key === "string" && key !== "location") throw new Error(`the journal at ${t.location} is closed`);
        const value = Reflect.get(t, key, t) as unknown;
        return typeof value === "function" ? value.bind(t) : value;
      },
    });
  },
};

const ALL: Backend[] = postgresInstalled() ? [sqlite, postgres, memory] : [sqlite, memory];

function selected(): Backend[] {
  const wanted = process.env.ATOMIC_TEST_BACKENDS?.split(",").map((s) => s.trim()).filter(Boolean);
  if (!wanted?.length) return ALL;
  if (wanted.includes("postgres") && !postgresInstalled()) throw new Error("ATOMIC_TEST_BACKENDS names postgres, but Postgres is not installed (scripts/test.sh installs it)");
  const unknown = wanted.filter((w) => !ALL.some((b) => b.name === w));
  if (unknown.length) throw new Error(`ATOMIC_TEST_BACKENDS names unknown backends: ${unknown.join(", ")}`);
  return ALL.filter((b) => wanted.includes(b.name));
}

export const BACKENDS: readonly Backend[] = selected();

let holders = 0;
/** A lease holder living in this (live) process, so only expiry, release or force frees its lease. */
export function liveHolder(name = "test"): HolderInfo {
  return { holderId: `${name}-${process.pid}-${++holders}` as HolderId, host: hostId(), pid: process.pid, pidStart: processStartTime(process.pid) };
}

/** A started root run (workflow `name`) under a live lease. */
export async function startRoot(journal: Journal, name = "test"): Promise<{ rootId: RunId; lease: Lease }> {
  const rootId = newRunId();
  const lease = await journal.acquireLease(rootId, liveHolder(name), { timeoutMs: 60_000 });
  await journal.append(lease, [
    {
      runId: rootId,
      type: "run_started",
      payload: {},
      newRun: { rootId, parentId: null, parentKey: null, depth: 0, workflowName: name, workflowPath: `/${name}.ts`, workflowDigest: "d", inputs: {} },
    },
  ]);
  return { rootId, lease };
}

/** A SQLite journal file in `dir` holding the tables of schema `version` exactly (migrated no further); the caller closes it. */
export async function sqliteAtVersion(dir: string, version: number): Promise<Database> {
  const db = new Database(join(dir, JOURNAL_FILE), { create: true });
  db.run("pragma journal_mode = wal");
  db.run("pragma foreign_keys = on");
  const k = new Kysely<Record<string, never>>({ dialect: new BunSqliteDialect(db) });
  await k.transaction().execute(async (trx) => {
    for (const m of MIGRATIONS.filter((x) => x.version <= version)) await m.up(trx);
    await sql`insert into meta (key, value) values ('schema_version', ${String(version)})`.execute(trx);
  });
  await k.destroy();
  return db;
}

/** A root run's row as versions 2 to 6 of the schema hold it (status and last_seq as given), for migration tests; its id. */
export function insertOldRoot(db: Database, status: string, lastSeq: number): RunId {
  const rootId = newRunId();
  db.run(
    `insert into runs (id, root_id, parent_id, depth, workflow_name, workflow_path, workflow_digest, inputs, status, created_at, updated_at, last_seq, control_ack)
     values (?, ?, null, 0, 'old', '/old.ts', 'd', '{}', ?, 1, 2, ?, 0)`,
    [rootId, rootId, status, lastSeq],
  );
  return rootId;
}

/**
 * `test` where `applies`, else nothing: a test of a promise the backend does
 * not make (a file hook, synchronous transactions) is not registered for it
 * at all, rather than reported as skipped.
 */
export function testWhen(applies: boolean): typeof test {
  return applies ? test : ((() => {}) as unknown as typeof test);
}
