/**
 * Temporary directories for tests. Each test makes its own (`makeTempDir`)
 * and an `afterEach(removeTempDirs)` deletes them all, so a failing test
 * leaves nothing behind; `withTempDir` scopes one directory to a callback.
 */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const created = new Set<string>();

export function makeTempDir(prefix = "atomic-test-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  created.add(dir);
  return dir;
}

/** Removes `dir` with the others at cleanup (a directory a helper made next to a temp dir). */
export function adoptTempDir(dir: string): void {
  created.add(dir);
}

export function removeTempDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  created.delete(dir);
}

/** Removes every directory `makeTempDir` made and that is still there. */
export function removeTempDirs(): void {
  for (const dir of [...created]) removeTempDir(dir);
}

export async function withTempDir<T>(cb: (dir: string) => Promise<T> | T): Promise<T> {
  const dir = makeTempDir();
  try {
    return await cb(dir);
  } finally {
    removeTempDir(dir);
  }
}
