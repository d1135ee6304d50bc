/**
 * Retention (issue 17): `atomic gc` deletes finished runs with their rows
 * and artifacts, never a live, parked or resumable run unless --force (and
 * never a live one even then); --dry-run deletes nothing and reports the
 * same counts; the journal file shrinks (a file made before incremental
 * vacuum too); a gc beside a live run does not disturb it; bad input is one
 * sentence and exit 2. Through dist/atomic.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { Database } from "bun:sqlite";
import { existsSync, mkdirSync, readFileSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const EFFECTS = fixture("effects.ts");

interface GcJson {
  runs: number;
  childRuns: number;
  rows: number;
  rowsByTable: Record<string, number>;
  artifactFiles: number;
  artifactBytes: number;
  kept: string[];
  orphanDirs: number;
  deleted: string[];
  storage?: { bytesBefore: number; bytesAfter: number; note?: string };
}

async function gc(home: string, ...args: string[]): Promise<GcJson> {
  const r = await runAtomic(["gc", "--json", ...args], { home });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!) as GcJson;
}

async function completedRun(home: string, out: string, ...inputs: string[]): Promise<string> {
  const r = await runAtomic(["run", EFFECTS, "--input", `out=${out}`, ...inputs.flatMap((i) => ["--input", i])], { home });
  expect(r.code).toBe(0);
  return /atomic show (\S+)/.exec(r.stdout)![1]!;
}

async function runIds(home: string): Promise<Map<string, string>> {
  const r = await runAtomic(["runs", "--json"], { home });
  expect(r.code).toBe(0);
  const rows = r.stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as { id: string; status: string });
  return new Map(rows.map((x) => [x.id, x.status]));
}

/** A run of effects.ts held in its tool "two" (until `waitFile` exists); resolves once it is there. */
async function heldRun(home: string, dir: string, name: string, extra: string[] = []) {
  const out = join(dir, `${name}.txt`);
  const waitFile = join(dir, `${name}.go`);
  const proc = spawnAtomic(["run", EFFECTS, "--input", `out=${out}`, "--input", `waitFile=${waitFile}`, ...extra], { home });
  await waitUntil(() => existsSync(out) && readFileSync(out, "utf8").includes("two:"), 30_000, `${name} to reach its tool "two"`);
  // The newest run is this one (the tests of a home start their runs one after another).
  const r = await runAtomic(["runs", "--json", "--limit", "1"], { home });
  const id = (JSON.parse(r.stdout.trim().split("\n")[0]!) as { id: string }).id;
  return { proc, out, waitFile, id };
}

e2eTest("gc deletes finished runs and their artifacts; never a live, parked or resumable one without --force, never a live one with it", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const done = await completedRun(home, join(dir, "done.txt"));
  const failed = await runAtomic(["run", fixture("fails.ts")], { home });
  expect(failed.code).toBe(1);
  // Parked: Ctrl-C while its question waits (awaiting_input, no driver).
  const parkedOut = join(dir, "parked.txt");
  const asking = spawnAtomic(["run", EFFECTS, "--input", `out=${parkedOut}`, "--input", "ask=true"], { home });
  const askingOut = lineWatcher(asking.stdout);
  await askingOut.waitFor(/go on\?/);
  asking.kill("SIGINT");
  await asking.exited;
  // Crashed: its driver killed in tool "two".
  const crashed = await heldRun(home, dir, "crashed");
  crashed.proc.kill("SIGKILL");
  await crashed.proc.exited;
  // Live: a driver holds it until its file appears.
  const live = await heldRun(home, dir, "live");

  const before = await runIds(home);
  expect(before.size).toBe(5);
  const statuses = [...before.values()].sort();
  expect(statuses).toEqual(["awaiting_input", "completed", "crashed", "failed", "running"]);
  expect(existsSync(join(home, "artifacts", done))).toBe(true);
  const failedId = [...before].find(([, s]) => s === "failed")![0];
  expect(existsSync(join(home, "artifacts", failedId))).toBe(true);

  // Newer than the cutoff: nothing goes.
  expect((await gc(home, "--older-than", "1h")).runs).toBe(0);

  const dry = await gc(home, "--older-than", "0s", "--dry-run");
  expect(dry.runs).toBe(2);
  expect((await runIds(home)).size).toBe(5);
  expect(existsSync(join(home, "artifacts", failedId))).toBe(true);

  const real = await gc(home, "--older-than", "0s");
  // The dry run reported what the real one did.
  expect({ runs: real.runs, rows: real.rows, rowsByTable: real.rowsByTable, files: real.artifactFiles, bytes: real.artifactBytes }).toEqual({
    runs: dry.runs,
    rows: dry.rows,
    rowsByTable: dry.rowsByTable,
    files: dry.artifactFiles,
    bytes: dry.artifactBytes,
  });
  expect(real.rowsByTable.events).toBeGreaterThan(0);
  expect(real.artifactFiles).toBeGreaterThan(0);
  expect(existsSync(join(home, "artifacts", failedId))).toBe(false);
  expect(existsSync(join(home, "artifacts", done))).toBe(false);
  const after = await runIds(home);
  expect([...after.values()].sort()).toEqual(["awaiting_input", "crashed", "running"]);
  const show = await runAtomic(["show", done], { home });
  expect(show.code).toBe(2);

  // --force: the parked and the crashed run go; the live one stays, said so.
  const forced = await gc(home, "--older-than", "0s", "--force");
  expect(forced.runs).toBe(2);
  expect(forced.kept).toEqual([live.id]);
  expect([...(await runIds(home)).values()]).toEqual(["running"]);

  // The live run was not disturbed: it finishes as usual.
  writeFileSync(live.waitFile, "");
  expect(await live.proc.exited).toBe(0);
  expect(readFileSync(live.out, "utf8")).toBe("one:a\ntwo:a\nthree:a\nfour:a\n");
  expect([...(await runIds(home)).values()]).toEqual(["completed"]);
}, 120_000);

e2eTest("the journal file shrinks after gc deletes many runs, also a file made before incremental vacuum", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  for (let i = 0; i < 6; i++) await completedRun(home, join(dir, "out.txt"), "big=200000");
  const db = join(home, "atomic.db");
  // Like a journal created by an earlier atomic: auto_vacuum none.
  const raw = new Database(db);
  raw.run("pragma auto_vacuum = none");
  raw.run("vacuum");
  expect(raw.query<{ auto_vacuum: number }, []>("pragma auto_vacuum").get()!.auto_vacuum).toBe(0);
  raw.close();
  const size = () => statSync(db).size + (existsSync(`${db}-wal`) ? statSync(`${db}-wal`).size : 0);
  const before = size();
  expect(before).toBeGreaterThan(3_000_000);
  const r = await gc(home, "--older-than", "0s");
  expect(r.runs).toBe(6);
  expect(r.storage!.note).toBeUndefined();
  expect(r.storage!.bytesBefore).toBeGreaterThanOrEqual(before * 0.9);
  expect(r.storage!.bytesAfter).toBeLessThan(before / 4);
  expect(size()).toBeLessThan(before / 4);
  const check = new Database(db, { readonly: true });
  expect(check.query<{ auto_vacuum: number }, []>("pragma auto_vacuum").get()!.auto_vacuum).toBe(2);
  check.close();
  // The next gc frees in steps (incremental), and the text report says what was freed.
  for (let i = 0; i < 3; i++) await completedRun(home, join(dir, "out.txt"), "big=200000");
  const grown = size();
  const text = await runAtomic(["gc", "--older-than", "0s"], { home });
  expect(text.code).toBe(0);
  expect(text.stdout).toMatch(/^deleted 3 runs, \d+ journal rows, \d+ artifact files \(.+\)\njournal file: .+ before, .+ after \(.+ freed\)\n(deleted \d+ pinned code files no remaining run uses\n)?$/);
  expect(size()).toBeLessThan(grown / 3);
}, 120_000);

e2eTest("a gc beside a live run deletes around it without disturbing it", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  for (let i = 0; i < 4; i++) await completedRun(home, join(dir, "old.txt"), "big=100000");
  const live = await heldRun(home, dir, "live", ["--input", "big=100000"]);
  const r = await gc(home, "--older-than", "0s", "--force");
  expect(r.runs).toBe(4);
  expect(r.kept).toEqual([live.id]);
  writeFileSync(live.waitFile, "");
  expect(await live.proc.exited).toBe(0);
  const show = await runAtomic(["show", live.id, "--json"], { home });
  expect(show.code).toBe(0);
  expect((JSON.parse(show.stdout) as { status: string }).status).toBe("completed");
  expect(readFileSync(live.out, "utf8")).toBe("one:a\ntwo:a\nthree:a\nfour:a\n");
}, 120_000);

e2eTest("gc removes artifact directories of runs no longer in the journal once they are older than the cutoff", async () => {
  const home = makeTempDir();
  const id = await completedRun(home, join(makeTempDir(), "out.txt"));
  // Left by a gc stopped between its commit and its file removal.
  const orphan = join(home, "artifacts", "01m8aaaaaaaaaaaaaa");
  mkdirSync(join(orphan, "0-x", "attempt-1"), { recursive: true });
  writeFileSync(join(orphan, "0-x", "attempt-1", "stdout.log"), "12345");
  const old = new Date(Date.now() - 2 * 3_600_000);
  utimesSync(orphan, old, old);
  expect((await gc(home, "--older-than", "1h", "--dry-run")).orphanDirs).toBe(1);
  expect(existsSync(orphan)).toBe(true);
  const r = await gc(home, "--older-than", "1h");
  expect({ runs: r.runs, orphanDirs: r.orphanDirs, files: r.artifactFiles, bytes: r.artifactBytes }).toEqual({ runs: 0, orphanDirs: 1, files: 1, bytes: 5 });
  expect(existsSync(orphan)).toBe(false);
  // The run's own directory (newer than the cutoff, and its run is there) stays.
  expect(existsSync(join(home, "artifacts", id))).toBe(true);
});

e2eTest("child runs go with their root, with their artifacts", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", fixture("forks.ts"), "--input", `out=${join(makeTempDir(), "out.txt")}`], { home });
  expect(r.code).toBe(0);
  const id = /atomic show (\S+)/.exec(r.stdout)![1]!;
  const shown = JSON.parse((await runAtomic(["show", id, "--json"], { home })).stdout) as { steps: { kind: string; childRunId?: string }[] };
  const childId = shown.steps.find((s) => s.kind === "child")!.childRunId!;
  expect((await runAtomic(["show", childId], { home })).code).toBe(0);
  const report = await gc(home, "--older-than", "0s");
  expect({ runs: report.runs, childRuns: report.childRuns, runRows: report.rowsByTable.runs }).toEqual({ runs: 1, childRuns: 1, runRows: 2 });
  expect((await runAtomic(["show", childId], { home })).code).toBe(2);
  expect(existsSync(join(home, "artifacts", id))).toBe(false);
  expect(existsSync(join(home, "artifacts", childId))).toBe(false);
});

e2eTest("gc refuses bad input in one sentence with a hint, exit 2", async () => {
  const home = makeTempDir();
  for (const [args, message] of [
    [["--older-than", "3x"], 'is not an age'],
    [["--status", "finished"], "is not a status gc can select"],
    [["--status", "crashed"], "can still continue, so gc deletes them only with --force"],
    [["--status", "running", "--force"], "gc never deletes running runs"],
  ] as const) {
    const r = await runAtomic(["gc", ...args], { home });
    expect(r.code).toBe(2);
    expect(expectOneSentenceError(r.stderr).message).toContain(message);
  }
});
