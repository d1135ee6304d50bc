/**
 * Temporary directories for tests. Each test makes its own (`makeTempDir`)
 * and an `afterEach(removeTempDirs)` deletes them all, so a failing test
 * leaves nothing behind; `withTempDir` scopes one directory to a callback.
 *
 * A process still running with one of them in its environment when it is
 * removed (`ATOMIC_HOME` under it, most often) would outlive its test and
 * could write there again: a reconnecting intercom client, for one, starts
 * a broker that recreates `home/intercom` in a directory already gone. So
 * removal first looks for such processes (one pass over /proc), kills them
 * and waits until they are gone, removes the directories, and then fails
 * the test that owned them, naming each process's command line. Intercom
 * brokers are killed without failing the test: a broker is detached by
 * design and would exit on its own within a second of its socket going.
 * Processes a SIGKILL is already ending are left to finish.
 */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROLE } from "../../src/shared/self-exec.ts";
import { isLive, processesUnder, type ProcessUnder } from "./processes.ts";

/** How long removal waits for the processes it killed to be gone. */
const KILLED_GONE_MS = 10_000;
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

/** Removes `dir`; throws, naming them, when processes outlived it (they are killed first). */
export function removeTempDir(dir: string): void {
  remove([dir]);
}

/** Removes every directory `makeTempDir` made and that is still there; throws like `removeTempDir`. */
export function removeTempDirs(): void {
  remove([...created]);
}

export async function withTempDir<T>(cb: (dir: string) => Promise<T> | T): Promise<T> {
  const dir = makeTempDir();
  try {
    return await cb(dir);
  } finally {
    removeTempDir(dir);
  }
}

function remove(dirs: string[]): void {
  const left = processesUnder(dirs);
  killAndWait(left);
  for (const dir of dirs) {
    rmSync(dir, { recursive: true, force: true });
    created.delete(dir);
  }
  const outlived = left.filter((p) => !p.cmdline.includes(ROLE.broker));
  if (outlived.length > 0) {
    throw new Error(
      `${outlived.length} process(es) still ran with a temp dir of this test in their environment when it was removed (killed now):\n` +
        outlived.map((p) => `  pid ${p.pid} under ${p.dir}: ${p.cmdline}`).join("\n"),
    );
  }
}

function killAndWait(procs: ProcessUnder[]): void {
  for (const p of procs) {
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
  const deadline = Date.now() + KILLED_GONE_MS;
  while (procs.some((p) => isLive(p.pid)) && Date.now() < deadline) Bun.sleepSync(5);
}
