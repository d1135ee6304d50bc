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
 */

import { join } from "node:path";
import { StorageError, UsageError } from "../shared/errors.ts";
import { addSecretsOfHome, addSecretsOfUrl } from "../shared/secrets.ts";
import { ensurePrivateHome } from "../shared/private-files.ts";
import { SqliteJournal } from "./sqlite/sqlite-journal.ts";
import { isPostgresUrl, redactUrl } from "./postgres/url.ts";
import { importEntry } from "../shared/entry-points.ts";
import type { Durability, Journal } from "./types.ts";

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
  makeHome(opts.home);
  if (url) {
    const { PostgresJournal } = (await importEntry("journal/postgres/postgres-journal.ts")) as unknown as typeof import("./postgres/postgres-journal.ts");
    return PostgresJournal.open(url, { durability: opts.durability });
  }
  return SqliteJournal.open(join(opts.home, JOURNAL_FILE), { durability: opts.durability });
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
