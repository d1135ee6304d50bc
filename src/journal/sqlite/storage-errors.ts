/**
 * SQLite failures as the journal reports them: a StorageError with a stable
 * code and a hint, never a raw SQLite stack trace.
 *
 * - storage_corrupt: not a SQLite file, or a damaged one. Not retryable.
 * - storage_readonly: the file or its directory cannot be written.
 * - storage_unavailable: busy beyond busy_timeout, disk full, I/O error.
 *   Retryable (docs/design/journal.md).
 *
 * Errors of a single entry (a constraint, a value JSON cannot hold) are not
 * storage faults: `isStorageFault` tells them apart, so an append batch
 * turns those into an "error" outcome but lets a full disk fail the batch.
 *
 * `writeStopped` picks, among storage faults met while a run is under way,
 * the ones waiting cannot cure soon (a full disk, a file system that went
 * read-only, an I/O error, a damaged or truncated file), as opposed to a
 * lock held beyond busy_timeout: on those a run stops at once, resumably,
 * with storage_unavailable (every process of the run: root, coordinator),
 * instead of retrying writes that keep failing until its lease runs out.
 */

import { AtomicError, StorageError } from "../../shared/errors.ts";

function sqliteCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && code.startsWith("SQLITE_") ? code : undefined;
}

const FAULT_PREFIXES = [
  "SQLITE_BUSY",
  "SQLITE_LOCKED",
  "SQLITE_FULL",
  "SQLITE_IOERR",
  "SQLITE_NOMEM",
  "SQLITE_CORRUPT",
  "SQLITE_NOTADB",
  "SQLITE_READONLY",
  "SQLITE_CANTOPEN",
  "SQLITE_PERM",
  "SQLITE_PROTOCOL",
];

/** True for failures of the storage itself, as opposed to one bad entry. */
export function isStorageFault(err: unknown): boolean {
  const code = sqliteCode(err);
  return code !== undefined && FAULT_PREFIXES.some((p) => code.startsWith(p));
}

const READONLY_ERRNO = new Set(["EACCES", "EPERM", "EROFS", "ENOTDIR"]);

export function readonlyError(path: string, cause: unknown): StorageError {
  return new StorageError("storage_readonly", `cannot write the journal at ${path} (${describe(cause)})`, {
    hint: "choose a writable --home or ATOMIC_HOME",
    cause,
  });
}

export function corruptError(path: string, cause: unknown): StorageError {
  return new StorageError("storage_corrupt", `the journal at ${path} is not an atomic database (${describe(cause)})`, {
    hint: "move it away or point --home at another directory",
    cause,
  });
}

/** Maps anything thrown while using the database at `path`; the engine's own errors pass through. */
export function toStorageError(err: unknown, path: string): Error {
  if (err instanceof AtomicError) return err;
  const code = sqliteCode(err) ?? (err as { code?: unknown } | null)?.code;
  if (typeof code === "string") {
    if (code.startsWith("SQLITE_NOTADB") || code.startsWith("SQLITE_CORRUPT")) return corruptError(path, err);
    if (
      code.startsWith("SQLITE_READONLY") ||
      code.startsWith("SQLITE_CANTOPEN") ||
      code.startsWith("SQLITE_PERM") ||
      code.startsWith("SQLITE_AUTH") ||
      READONLY_ERRNO.has(code)
    ) {
      return readonlyError(path, err);
    }
    if (isStorageFault(err)) {
      const why = code.startsWith("SQLITE_FULL") ? "the disk is full" : describe(err);
      return new StorageError("storage_unavailable", `the journal at ${path} is unavailable (${why})`, {
        hint: "check free disk space and that no other program holds the database locked; then resume",
        cause: err,
      });
    }
  }
  return err instanceof Error ? err : new Error(String(err));
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Causes no wait cures soon: the disk is full, the file system refuses writes, the file is damaged. */
const STOP_PREFIXES = ["SQLITE_FULL", "SQLITE_IOERR", "SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM"];
const STOP_ERRNO = new Set(["ENOSPC", "EROFS", "EIO", "EDQUOT"]);

/**
 * The storage_unavailable error a run stops with when `err` (from a journal
 * write under way) says the journal cannot take writes now; undefined for
 * anything else (a busy lock, one bad entry, the engine's own errors).
 * A journal that turned read-only mid-run is storage_unavailable too: the
 * run can go on once the home is writable again (`storage_readonly` is for
 * a home that never was).
 */
export function writeStopped(err: unknown): StorageError | undefined {
  if (!(err instanceof StorageError)) return undefined;
  if (err.stopsRun) return err; // the backend gave up waiting for it (StorageError.stopsRun)
  const cause = (err as { cause?: unknown }).cause;
  const code = sqliteCode(cause) ?? (cause as { code?: unknown } | undefined)?.code;
  if (typeof code !== "string" || !(STOP_PREFIXES.some((p) => code.startsWith(p)) || STOP_ERRNO.has(code))) return undefined;
  if (err.code === "storage_unavailable") return err;
  const path = /journal at (\S+)/.exec(err.message)?.[1] ?? "the journal";
  const what = err.code === "storage_readonly" ? "became read-only" : "is damaged or was truncated";
  return new StorageError("storage_unavailable", `the journal at ${path} ${what} while the run used it (${describe(cause)})`, { cause });
}
