/**
 * Temporary directories for tests. Each test makes its own (`makeTempDir`)
 * and an `afterEach(removeTempDirs)` deletes them all, so a failing test
 * leaves nothing behind; `withTempDir` scopes one directory to a callback.
 *
 * A process still running with one of them in its environment when it is
 * removed (`ATOMIC_HOME` under it, most often) would outlive its test and
 * could write there again: a reconnecting intercom client, for one, starts
 * a broker that recreates `home/intercom` in a directory already gone. So
 * removal first looks for such processes (one pass over /proc). Intercom
 * brokers are killed at once without failing the test: a broker is
 * detached by design and would exit on its own within a second of its
 * socket going. The others get a few seconds to end by themselves (a
 * coordinator, its workers and their guard end once the root the test
 * killed is gone; processes a SIGKILL is already ending are not counted);
 * those still running then are killed, and once they are gone the
 * directories are removed and the test that owned them fails, naming each
 * process's command line. Nothing is removed while one of them runs, so
 * none can write there again after the removal.
 */

import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROLE } from "../../src/shared/self-exec.ts";
import { isLive, processesUnder, type ProcessUnder } from "./processes.ts";

/** How long the processes found get to end by themselves (their parent was just killed), then to die once killed. */
const END_BY_THEMSELVES_MS = 5_000;
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

/** Every regular file under `dir`, recursively (sockets and directories left out; a file gone meanwhile too). */
export function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: "utf8" })
    .map((f) => join(dir, f))
    .filter((f) => statSync(f, { throwIfNoEntry: false })?.isFile());
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
  const found = processesUnder(dirs);
  const brokers = found.filter((p) => p.cmdline.includes(ROLE.broker));
  killAndWait(brokers);
  const outlived = stillRunning(found.filter((p) => !brokers.includes(p)), END_BY_THEMSELVES_MS);
  killAndWait(outlived);
  for (const dir of dirs) {
    rmSync(dir, { recursive: true, force: true });
    created.delete(dir);
  }
  if (outlived.length > 0) {
    throw new Error(
      `${outlived.length} process(es) still ran with a temp dir of this test in their environment when it was removed (killed now):\n` +
        outlived.map((p) => `  pid ${p.pid} under ${p.dir}: ${p.cmdline}`).join("\n"),
    );
  }
}

/** Those of `procs` still live after up to `ms` (at once when none is). */
function stillRunning(procs: ProcessUnder[], ms: number): ProcessUnder[] {
  const deadline = Date.now() + ms;
  while (procs.some((p) => isLive(p.pid)) && Date.now() < deadline) Bun.sleepSync(10);
  return procs.filter((p) => isLive(p.pid));
}

function killAndWait(procs: ProcessUnder[]): void {
  for (const p of procs) {
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
  stillRunning(procs, KILLED_GONE_MS);
}
