/**
 * Is the journal still the file this process opened?
 *
 * SQLite keeps its file descriptors: when `atomic.db` (and its -wal/-shm)
 * is deleted, or another file is moved into its place, while a run is live,
 * every write still succeeds, into an inode nobody can open any more. The
 * run would end "completed" and be gone from `runs`. So each process that
 * holds the journal compares the device and inode behind the path with what
 * it saw when it opened the file: before it reports how a run ended, and
 * periodically while it runs (the root with its control poll, the pool
 * coordinator with its sweep). A mismatch is `storage_unavailable` naming
 * the path; the process stops writing and says so.
 *
 * bun:sqlite does not expose its descriptor, so "what it saw at open" is a
 * stat of the path right after the connection opened it.
 *
 * A file truncated under the run (`truncate`, `> atomic.db`) keeps its
 * inode; SQLite then reports I/O errors or "database disk image is
 * malformed". The only shrinking SQLite does itself is `atomic gc`'s vacuum
 * (sqlite/retention.ts): a checkpoint truncates the file to a whole number
 * of pages, its header intact. So a size below the largest one seen is that
 * truncation, named as such, unless the file still starts with a SQLite
 * header and ends on a page boundary. (Not "exactly the header's page
 * count": a checkpoint that grows the file again writes page 1, with the
 * new count, before the pages that extend it, and a check may fall in
 * between.)
 */

import { closeSync, openSync, readSync, statSync } from "node:fs";
import { StorageError } from "../../shared/errors.ts";

export interface FileIdentity {
  dev: number;
  ino: number;
  /** The largest size seen so far (updated by each check). */
  size: number;
}

/** The identity of the file at `path` now; undefined when there is none (an in-memory database). */
export function fileIdentity(path: string): FileIdentity | undefined {
  try {
    return identityAt(path);
  } catch {
    return undefined;
  }
}

function identityAt(path: string): FileIdentity {
  const st = statSync(path);
  return { dev: st.dev, ino: st.ino, size: st.size };
}

const HINT =
  "the run's record went with the old file: put the original atomic.db (with its -wal file) back and resume the run, or start it again; never delete or replace the journal while a run uses it";

/**
 * A truncated file keeps its -wal file, where the latest records are until
 * a checkpoint: resume reads what both still hold. `resume` is the command
 * with the run's id when the caller knows it (engine/run-tree.ts).
 */
export function truncatedHint(resume = "atomic resume RUN"): string {
  return `resume the run: ${resume} reads what atomic.db and its -wal file still hold and runs again only the steps whose records are gone (if the run's own record is gone, it says so: start the run again then); never truncate the journal while a run uses it`;
}
export const TRUNCATED_HINT = truncatedHint();

/** An error when the file at `path` is no longer `opened` (deleted or replaced); undefined while it is. */
export function fileChanged(path: string, opened: FileIdentity): StorageError | undefined {
  let now: FileIdentity;
  try {
    now = identityAt(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== "ENOENT" && code !== "ENOTDIR") return undefined; // unreadable now (EACCES...): the writes themselves will say
    return new StorageError("storage_unavailable", `the journal file ${path} was deleted while this process was using it`, { hint: HINT, cause: err });
  }
  if (now.dev === opened.dev && now.ino === opened.ino) {
    if (now.size >= opened.size || wholePages(path, now.size)) {
      opened.size = now.size;
      return undefined;
    }
    return new StorageError(
      "storage_unavailable",
      `the journal file ${path} was truncated (from ${opened.size} to ${now.size} bytes) while this process was using it`,
      { hint: TRUNCATED_HINT },
    );
  }
  return new StorageError("storage_unavailable", `the journal file ${path} was replaced by another file while this process was using it`, { hint: HINT });
}

/** Whether the file at `path` is `size` bytes of whole SQLite pages: it starts with a SQLite header whose page size divides `size`. */
function wholePages(path: string, size: number): boolean {
  const header = Buffer.alloc(100);
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    if (readSync(fd, header, 0, 100, 0) < 100) return false;
  } catch {
    return false;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  if (header.toString("latin1", 0, 16) !== "SQLite format 3\0") return false;
  const raw = header.readUInt16BE(16);
  const pageSize = raw === 1 ? 65536 : raw;
  // A page size is a power of two from 512 to 65536.
  if (pageSize < 512 || (pageSize & (pageSize - 1)) !== 0) return false;
  return size >= pageSize && size % pageSize === 0;
}
