/**
 * A journal on a home this process cannot write (a read-only mount, a
 * directory another user owns with mode 0500): reading commands (`runs`,
 * `show`, `logs`, `serve`) still open it, read-only; a command that would
 * change it is refused with one sentence saying why (`readOnlyRefusal`).
 *
 * SQLite cannot open a WAL database read-only when it may not create the
 * -shm file beside it (SQLITE_CANTOPEN). So, when a plain read-only open
 * fails, the file is opened `immutable` (no locks, no shared memory) —
 * only when there is no -wal file with content: every commit is then in
 * the main file (the last writer checkpointed it on close), so nothing
 * recorded is missed. A journal that needs a schema upgrade is not opened
 * (the upgrade is a write): the open's own storage_readonly error stands.
 */

import { Database, constants } from "bun:sqlite";
import { accessSync, constants as fsConstants, existsSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { StorageError } from "../../shared/errors.ts";

/** The database at `path` opened read-only; undefined when there is none or SQLite cannot read it so. */
export function openReadOnlyDatabase(path: string): Database | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const db = new Database(path, { readonly: true });
    db.query("select count(*) from sqlite_master").get(); // opening is lazy: the first read finds a missing -shm
    return db;
  } catch {
    // fall through to an immutable open
  }
  if (walSize(path) > 0) return undefined;
  try {
    const uri = `file:${encodeURI(path).replace(/\?/g, "%3f").replace(/#/g, "%23")}?immutable=1`;
    const db = new Database(uri, constants.SQLITE_OPEN_READONLY | constants.SQLITE_OPEN_URI);
    db.query("select count(*) from sqlite_master").get();
    return db;
  } catch {
    return undefined;
  }
}

function walSize(path: string): number {
  try {
    return statSync(`${path}-wal`).size;
  } catch {
    return 0;
  }
}

/**
 * Whether this process may write the journal at `path` and its directory. SQLite opens a file it may only read
 * without a word (read-only, as on a read-only mount whose -shm it can read), so this is asked as well.
 */
export function journalWritable(path: string): boolean {
  for (const p of [path, dirname(path)]) {
    try {
      accessSync(p, fsConstants.W_OK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "EROFS" || code === "EACCES" || code === "EPERM") return false;
    }
  }
  return true;
}

/** What a write to a journal opened read-only fails with. */
export function readOnlyRefusal(path: string, cause: unknown): StorageError {
  return new StorageError("storage_readonly", `cannot write the journal at ${path}: the atomic home ${dirname(path)} is read-only for this user, and this command changes runs`, {
    hint: "reading commands (runs, show, logs, serve) work on it as it is; to run, resume, cancel or send, make it writable or choose a writable --home or ATOMIC_HOME",
    cause,
  });
}
