/**
 * Choosing and opening the journal: the embedded SQLite file
 * `${home}/atomic.db` unless a journal URL names another backend.
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
  if (url) refuseUrl(url);
  makeHome(opts.home);
  return SqliteJournal.open(join(opts.home, JOURNAL_FILE), { durability: opts.durability });
}

function refuseUrl(url: string): never {
  if (/^postgres(ql)?:\/\//i.test(url)) {
    throw new UsageError("postgres_unsupported", "the Postgres journal is not available in this version", {
      hint: "omit --journal to use the embedded SQLite journal",
    });
  }
  throw new UsageError("journal_url_unsupported", `unsupported journal URL ${redact(url)}`, {
    hint: "omit --journal to use the embedded SQLite journal",
  });
}

/** Hides a password in a URL before it is printed. */
function redact(url: string): string {
  return url.replace(/\/\/([^:/@]+):[^@]*@/, "//$1:***@");
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
