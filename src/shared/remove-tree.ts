/**
 * Deleting a directory of artifact files and saying what went: gc and the
 * service's retention (engine/retention.ts) and the shared-directory
 * artifact store (artifacts/directory-store.ts) count the files and bytes
 * they delete (or, with `dryRun`, would delete).
 */

import { readdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";

/** Counts the files under `dir` (but those `skip` names) and, unless `dryRun`, removes the whole directory. */
export function removeTree(dir: string, opts: { dryRun?: boolean; skip?: (name: string) => boolean } = {}): { files: number; bytes: number } {
  const total = { files: 0, bytes: 0 };
  const walk = (path: string) => {
    let entries;
    try {
      entries = readdirSync(path, { withFileTypes: true });
    } catch {
      return; // none (a run without stages) or already gone
    }
    for (const e of entries) {
      const child = join(path, e.name);
      if (e.isDirectory()) walk(child);
      else if (!opts.skip?.(e.name)) {
        total.files++;
        total.bytes += statSync(child, { throwIfNoEntry: false })?.size ?? 0; // removed meanwhile: 0
      }
    }
  };
  walk(dir);
  if (!opts.dryRun) rmSync(dir, { recursive: true, force: true });
  return total;
}
