/**
 * Choosing and opening the journal: the embedded SQLite file
 * `${home}/atomic.db` unless a journal URL names another backend: a
 * `postgres://` (or `postgresql://`) URL opens the Postgres journal
 * (postgres/postgres-journal.ts, a bundle of its own loaded only then).
 * The home is still made: artifacts, logs and host-local state live there.
 *
 * `home` is created on demand, readable by its owner only (it holds run
 * inputs and outputs). Failures come back as StorageError/UsageError with a
 * hint, never as a raw errno.
 *
 * The host-wide agent session slots (./admission-slots.ts) are opened here
 * too: their contract file names no implementation, so it and
 * ./sqlite/admission-slots.ts do not import each other.
 */

import { existsSync } from "node:fs";
import { join } from "node:path";
import { StorageError, UsageError } from "../shared/errors.ts";
import { addSecretsOfHome, addSecretsOfUrl } from "../shared/secrets.ts";
import { ensurePrivateHome } from "../shared/private-files.ts";
import { SqliteJournal } from "./sqlite/sqlite-journal.ts";
import { SqliteAdmissionSlots } from "./sqlite/admission-slots.ts";
import type { AdmissionSlots } from "./admission-slots.ts";
import { isPostgresUrl, redactUrl } from "./postgres/url.ts";
import { importEntry } from "../shared/entry-points.ts";
import type { Durability, Journal } from "./journal.ts";

export interface OpenJournalOptions {
  /** The atomic home directory (`ATOMIC_HOME`, `--home`). */
  home: string;
  durability: Durability;
  /** `--journal` / `ATOMIC_JOURNAL`; empty or absent means the embedded SQLite journal. */
  journalUrl?: string | undefined;
}

export const JOURNAL_FILE = "atomic.db";

export async function openJournal(opts: OpenJournalOptions): Promise<Journal> {
  const url = opts.journalUrl?.trim();
  // Every process that opens the journal redacts its password and the home's status token (shared/secrets.ts).
  addSecretsOfUrl(url);
  addSecretsOfHome(opts.home);
  if (url && !isPostgresUrl(url)) refuseUrl(url);
  if (url) {
    // The database first: a URL that does not work leaves no home behind either (nothing written).
    const journal = await (await postgres()).PostgresJournal.open(url, { durability: opts.durability });
    try {
      makeHome(opts.home);
    } catch (err) {
      await journal.close();
      throw err;
    }
    return journal;
  }
  makeHome(opts.home);
  return SqliteJournal.open(join(opts.home, JOURNAL_FILE), { durability: opts.durability });
}

type PostgresModule = typeof import("./postgres/postgres-journal.ts");

async function postgres(): Promise<PostgresModule> {
  return (await importEntry("journal/postgres/postgres-journal.ts")) as unknown as PostgresModule;
}

export interface JournalReport {
  location: string;
  ok: boolean;
  detail: string;
  problem?: string;
  hint?: string;
}

/**
 * Where the journal is and whether it can be used, for `doctor`: writes
 * nothing (no file, no schema is created; a Postgres journal is connected
 * to and its schema version read).
 */
export async function describeJournal(opts: Omit<OpenJournalOptions, "durability">): Promise<JournalReport> {
  const url = opts.journalUrl?.trim();
  addSecretsOfUrl(url);
  if (!url) {
    const file = join(opts.home, JOURNAL_FILE);
    return { location: file, ok: true, detail: existsSync(file) ? "embedded SQLite" : "embedded SQLite, not created yet" };
  }
  if (!isPostgresUrl(url)) return { location: redactUrl(url), ok: false, detail: "", problem: "unsupported journal URL", hint: "use a postgres://user@host:5432/database URL" };
  return (await postgres()).probePostgres(url);
}

function refuseUrl(url: string): never {
  throw new UsageError("journal_url_unsupported", `unsupported journal URL ${redactUrl(url)}`, {
    hint: "use a postgres://user@host:5432/database URL, or omit --journal for the embedded SQLite journal",
  });
}

function makeHome(home: string): void {
  try {
    ensurePrivateHome(home);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EACCES" || code === "EROFS" || code === "ENOTDIR" || code === "EPERM" || code === "EEXIST") {
      throw new StorageError("storage_readonly", `cannot create the atomic home ${home} (${code})`, {
        hint: "choose a writable --home or ATOMIC_HOME",
        cause: err,
      });
    }
    throw new StorageError("storage_unavailable", `cannot create the atomic home ${home} (${code ?? String(err)})`, {
      hint: "check the path and free disk space, or choose another --home",
      cause: err,
    });
  }
}

/** Host-wide agent session slots (./admission-slots.ts): a small SQLite file `slots.db` in `dir` (created, 0700, on first open). */
export function openAdmissionSlots(dir: string): AdmissionSlots {
  return new SqliteAdmissionSlots(dir);
}

/** The slots' file in `dir`, for callers that must not create it (doctor only reads an existing one). */
export function admissionSlotsFile(dir: string): string {
  return SqliteAdmissionSlots.file(dir);
}
