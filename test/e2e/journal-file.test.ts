/**
 * A journal file deleted or replaced under a live run is noticed (issue 12
 * item 9): SQLite keeps writing into the old inode, so without the check
 * the run ends "completed", exit 0, and is gone from `runs`. Every process
 * holding the journal compares the path's device and inode with what it
 * opened, periodically and before the run reports how it ended: the run
 * stops with storage_unavailable naming the path, one sentence and a hint,
 * exit code 1. Through dist/atomic, with the pool (root, coordinator,
 * workers); no process is left behind.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { copyFileSync, existsSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { processesWithHome, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, makeTempDir, STACK_LINE } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const SWAP = fixture("journal-swap.ts");

/** The last two lines of stderr (progress lines come before them): the error and its hint. */
function finalError(stderr: string): { message: string; hint: string | undefined } {
  expect(stderr).not.toMatch(STACK_LINE);
  return expectOneSentenceError(stderr.trimEnd().split("\n").slice(-2).join("\n"));
}

/** A fresh, valid atomic journal elsewhere (what "another file" looks like at its most deceptive). */
async function anotherJournal(dir: string): Promise<string> {
  const other = makeTempDir();
  expect((await runAtomic(["runs"], { home: other })).code).toBe(0);
  const path = join(dir, "other.db");
  copyFileSync(join(other, "atomic.db"), path);
  return path;
}

async function liveRun(home: string, dir: string, extra: string[] = []) {
  const proc = spawnAtomic(["run", SWAP, "--input", `dir=${dir}`, "--input", `home=${home}`, ...extra], { home });
  const out = Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { proc, out };
}

for (const how of ["deleted", "replaced"] as const) {
  e2eTest(`atomic.db ${how} mid-run (with its -wal and -shm): the run stops by itself with storage_unavailable naming the path`, async () => {
    const home = makeTempDir();
    const dir = makeTempDir();
    const other = how === "replaced" ? await anotherJournal(dir) : undefined;
    const { out } = await liveRun(home, dir);
    await waitUntil(() => existsSync(join(dir, "started")), 30_000, "the stage to start");
    const db = join(home, "atomic.db");
    for (const f of [db, `${db}-wal`, `${db}-shm`]) rmSync(f, { force: true });
    if (other) copyFileSync(other, db);
    // The gate stays shut: only the periodic check can end this run (its stage is cancelled).
    const [stdout, stderr, code] = await out;
    expect(code).toBe(1);
    expect(stdout).not.toMatch(/run \S+ completed/);
    const err = finalError(stderr);
    expect(err.message).toBe(`the journal file ${db} was ${how === "deleted" ? "deleted" : "replaced by another file"} while this process was using it.`);
    expect(err.hint).toMatch(/resume/);
    await waitUntil(() => processesWithHome(home).length === 0, 10_000, "every process of the run to exit");
  });

  e2eTest(`atomic.db ${how} just before the run ends: the end is not reported as completed`, async () => {
    const home = makeTempDir();
    const dir = makeTempDir();
    if (how === "replaced") await anotherJournal(dir);
    writeFileSync(join(dir, "gate"), "");
    const { out } = await liveRun(home, dir, ["--input", `finally=${how === "deleted" ? "delete" : "replace"}`]);
    const [stdout, stderr, code] = await out;
    expect(code).toBe(1);
    expect(stdout).not.toMatch(/run \S+ completed/);
    expect(finalError(stderr).message).toContain(`the journal file ${join(home, "atomic.db")} was`);
    await waitUntil(() => processesWithHome(home).length === 0, 10_000, "every process of the run to exit");
  });
}

e2eTest("the journal left in place: the same run completes (exit 0)", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  writeFileSync(join(dir, "gate"), "");
  const { out } = await liveRun(home, dir);
  const [stdout, , code] = await out;
  expect(code).toBe(0);
  expect(stdout).toMatch(/"text": "done"/);
});
