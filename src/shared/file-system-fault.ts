/**
 * A file system that refused atomic's own files (the home's pinned code,
 * artifacts, logs, config; the journal has its own sentences in
 * journal/sqlite/storage-errors.ts): read-only (EROFS, also a disk the
 * kernel turned read-only after an error), full (ENOSPC), over quota
 * (EDQUOT) or failing (EIO). These are the machine's state, not a bug in
 * atomic: wherever such an error reaches a command's end or an HTTP
 * answer, it is the one storage sentence (storage_unavailable, naming the
 * file and why) and a hint, never "internal".
 */

import { AtomicError, StorageError } from "./errors.ts";

const WHY: Record<string, string> = {
  EROFS: "the file system is read-only",
  ENOSPC: "the disk is full",
  EDQUOT: "the disk quota is used up",
  EIO: "the disk reported an I/O error",
};

export const FILE_SYSTEM_FAULT_HINT = "make the file system writable again (free space, remount or repair it), then run the command again; a run it stopped stays resumable";

/** The storage error for a raw file-system error `err`, or undefined when it is not one (the engine's own errors pass). */
export function fileSystemFault(err: unknown): StorageError | undefined {
  if (err instanceof AtomicError || typeof err !== "object" || err === null) return undefined;
  const { code, path } = err as NodeJS.ErrnoException;
  const why = typeof code === "string" ? WHY[code] : undefined;
  if (!why) return undefined;
  // A write(2) fails without a path (Bun names one for open, mkdir, rename).
  const file = typeof path === "string" ? path : "to the file system";
  return new StorageError("storage_unavailable", `atomic could not write ${file}: ${why} (${code})`, { hint: FILE_SYSTEM_FAULT_HINT, cause: err });
}
