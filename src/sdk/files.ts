/**
 * `writeFileAtomic`: a file that readers see whole or not at all (a ledger
 * another process may read while a run writes it, or that a crash must not
 * leave half written): the text goes to a temporary file in the same
 * directory, which then replaces the target in one rename. The directory
 * is made when missing. Use it inside `ctx.tool` so the write is a
 * recorded step.
 */

import { mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

/** Writes `text` to `path` so readers see the old file or the new one, never a part; resolves to `path`. */
export function writeFileAtomic(path: string, text: string): string {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  try {
    writeFileSync(tmp, text);
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
  return path;
}
