/**
 * Storage that stops taking writes under a live run (issue 13 item 3): a
 * home on a tmpfs that fills, a home on ext4 that the kernel turns
 * read-only, a journal file truncated. The run stops by itself within
 * seconds (no stage waits out its 30 s lease), with storage_unavailable:
 * one sentence naming the journal and why, and a hint with the resume
 * command; exit code 1; every process of the run gone. Once storage is
 * back, `atomic resume` completes the run. The first Ctrl-C still ends a
 * run whose disk is full. Through dist/atomic with the pool (root,
 * coordinator, workers); root only (mounts, loop devices), each undone in
 * finally.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readdirSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { killProcessesWithHome, processesWithHome, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { CAN_LOOP, CAN_MOUNT, mountLoopExt4, mountTmpfs, unmountAll } from "../helpers/mounts.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, makeTempDir, STACK_LINE } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(async () => {
  await cleanupNow();
  unmountAll();
});

const SWAP = fixture("journal-swap.ts");
const FANOUT = fixture("journal-fanout.ts");
/** Far below the run's lease (30 s): the run must stop on the fault, not on its lease running out. */
const PROMPTLY_MS = 20_000;

function finalError(stderr: string): { message: string; hint: string | undefined } {
  expect(stderr).not.toMatch(STACK_LINE);
  return expectOneSentenceError(stderr.trimEnd().split("\n").slice(-2).join("\n"));
}

/** journal-swap's stage waits for `$dir/gate` after touching `$dir/started`. */
function liveRun(home: string, dir: string) {
  const proc = spawnAtomic(["run", SWAP, "--input", `dir=${dir}`, "--input", `home=${home}`], { home });
  let exited = false;
  const out = Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]).finally(() => (exited = true));
  return { proc, out, exited: () => exited };
}

/** Fills the file system holding `dir` (ENOSPC ends the write). */
function fill(dir: string): string {
  const filler = join(dir, "filler");
  Bun.spawnSync(["dd", "if=/dev/zero", `of=${filler}`, "bs=1M", "count=64"], { stdout: "ignore", stderr: "ignore" });
  return filler;
}

const runIdOf = (stdout: string) => /started run (\S+)/.exec(stdout)?.[1];

async function expectStoppedResumably(home: string, run: ReturnType<typeof liveRun>, reason: RegExp): Promise<string> {
  await waitUntil(run.exited, PROMPTLY_MS, "the run to stop on the storage fault");
  const [stdout, stderr, code] = await run.out;
  expect(code).toBe(1);
  expect(stdout).not.toMatch(/run \S+ completed/);
  const err = finalError(stderr);
  expect(err.message).toMatch(reason);
  const id = runIdOf(stdout)!;
  expect(err.hint).toContain(`atomic resume ${id}`);
  await waitUntil(() => processesWithHome(home).length === 0, 10_000, "every process of the run to exit");
  return id;
}

async function resumeCompletes(home: string, dir: string, id: string): Promise<void> {
  writeFileSync(join(dir, "gate"), "");
  const r = await runAtomic(["resume", id], { home });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(r.stdout).toMatch(/"text": "done"/);
}

/** Runs `fn` with a mount; whatever runs from its home is killed before it is undone, also when `fn` fails. */
async function withMount<M extends { dir: string; cleanup(): void }>(m: M, fn: (m: M) => Promise<void>): Promise<void> {
  try {
    await fn(m);
  } finally {
    killProcessesWithHome(m.dir);
    await waitUntil(() => processesWithHome(m.dir).length === 0, 10_000, "the run's processes to go before the unmount").catch(() => {});
    m.cleanup();
  }
}

if (CAN_MOUNT) {
  e2eTest("a home on a tmpfs that fills mid-run: the run stops at once with storage_unavailable, and resume completes it once space is freed", async () => {
    await withMount(mountTmpfs(8), async (m) => {
      const home = m.dir;
      const dir = makeTempDir();
      const run = liveRun(home, dir);
      await waitUntil(() => existsSync(join(dir, "started")), 30_000, "the stage to start");
      const filler = fill(home);
      const id = await expectStoppedResumably(home, run, /^the journal at .*atomic\.db is unavailable \(the disk is full\)\.$/);
      // Not shown as a live run any more; resumable.
      const runs = await runAtomic(["runs", "--json"], { home });
      expect(JSON.parse(runs.stdout.split("\n")[0]!).status).toBe("crashed");
      rmSync(filler);
      await resumeCompletes(home, dir, id);
    });
  });

  e2eTest("the first Ctrl-C (SIGINT) still ends a run whose disk is full, with the same one sentence", async () => {
    await withMount(mountTmpfs(8), async (m) => {
      const home = m.dir;
      const dir = makeTempDir();
      const run = liveRun(home, dir);
      await waitUntil(() => existsSync(join(dir, "started")), 30_000, "the stage to start");
      fill(home);
      run.proc.kill("SIGINT");
      await expectStoppedResumably(home, run, /^the journal at .*atomic\.db is unavailable \(the disk is full\)\.$/);
    });
  });

  e2eTest("atomic.db truncated mid-run: the run stops and says the file was truncated (not a lock, not worker_lost)", async () => {
    const home = makeTempDir();
    const dir = makeTempDir();
    const run = liveRun(home, dir);
    await waitUntil(() => existsSync(join(dir, "started")), 30_000, "the stage to start");
    truncateSync(join(home, "atomic.db"), 0);
    await waitUntil(run.exited, PROMPTLY_MS, "the run to stop on the truncated journal");
    const [stdout, stderr, code] = await run.out;
    expect(code).toBe(1);
    expect(stdout + stderr).not.toMatch(/database is locked|worker_lost|lease_lost/);
    // The live view calls the stage what `atomic show` calls it; a stage failed by the damaged file (I/O errors,
    // on a busy machine before the periodic check saw the file) is stopped too, never retried nor failed.
    // A stage the live view still showed queued (its start not yet heard on a busy machine) says why instead of how long.
    expect(stdout).toMatch(/stage work stopped( in |: the journal file)/);
    expect(stdout).not.toMatch(/stage work (failed|retrying)/);
    expect(finalError(stderr).message).toMatch(/^the journal file .*atomic\.db was truncated \(from \d+ to 0 bytes\) while this process was using it\.$/);
    await waitUntil(() => processesWithHome(home).length === 0, 10_000, "every process of the run to exit");
  });

  for (const to of ["zero", "half"] as const) {
    e2eTest(`atomic.db truncated to ${to} during a fan-out: the run is crashed, its hint says what resume does, and resume completes it`, async () => {
      const home = makeTempDir();
      const dir = makeTempDir();
      const proc = spawnAtomic(["run", FANOUT, "--input", `dir=${dir}`], { home });
      const out = Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      await waitUntil(() => readdirSync(dir).filter((f) => f.startsWith("started-")).length >= 2, 30_000, "the fan-out to start");
      const db = join(home, "atomic.db");
      truncateSync(db, to === "zero" ? 0 : Math.floor(statSync(db).size / 2));
      const [stdout, stderr, code] = await out;
      expect(code).toBe(1);
      expect(stdout).not.toMatch(/run \S+ (completed|failed)/);
      const id = runIdOf(stdout)!;
      const err = finalError(stderr);
      expect(err.message).toMatch(/^the journal (file|at) .*atomic\.db (was truncated|is damaged or was truncated)/);
      expect(err.hint).toContain(`resume the run: atomic resume ${id} reads what atomic.db and its -wal file still hold`);
      expect(err.hint).not.toMatch(/went with the old file|free space/);
      await waitUntil(() => processesWithHome(home).length === 0, 10_000, "every process of the run to exit");
      // Its true state: resumable, not failed.
      const runs = await runAtomic(["runs", "--json"], { home });
      expect(JSON.parse(runs.stdout.split("\n")[0]!).status).toBe("crashed");
      writeFileSync(join(dir, "gate"), "");
      const r = await runAtomic(["resume", id], { home });
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(JSON.parse(/\{[\s\S]*\}/.exec(r.stdout)![0]).texts).toEqual(Array.from({ length: 6 }, (_, i) => `done-${i}`));
    });
  }
}

if (CAN_LOOP) {
  e2eTest("a home on ext4 that turns read-only mid-run: the run stops with storage_unavailable; repaired, resume completes it", async () => {
    await withMount(mountLoopExt4(), async (m) => {
      const home = m.dir;
      const dir = makeTempDir();
      const run = liveRun(home, dir);
      await waitUntil(() => existsSync(join(dir, "started")), 30_000, "the stage to start");
      m.breakIt();
      const id = await expectStoppedResumably(home, run, /^the journal at .*atomic\.db (is unavailable|became read-only)/);
      // Before the repair a resume cannot write the home (its pinned code first): the one storage sentence, not "a bug".
      const early = await runAtomic(["resume", id], { home });
      expect(early.code).toBe(1);
      const refused = finalError(early.stderr);
      expect(refused.message).toMatch(/read-only|unavailable/);
      expect(refused.hint).toMatch(/writable again/);
      await m.repair();
      await resumeCompletes(home, dir, id);
    });
  });
}
