/**
 * A run's working directory and workflow file on resume (issue 13 item 8):
 * the directory a run starts in is recorded, `atomic resume` runs the rest
 * there wherever it is typed (and says so in one line); a recorded
 * directory that is gone is one sentence with a hint; a run whose file
 * moved resumes the code it is pinned to; `--workflow FILE` resumes it on
 * another file while replay stays consistent, and a file that no longer
 * replays is refused. Through dist/atomic.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

/** A project directory holding the workflow, and a run of it started there that failed (its gate shut). */
async function failedRun(home: string) {
  const project = makeTempDir();
  const wf = join(project, "place.ts");
  copyFileSync(fixture("place.ts"), wf);
  const gate = join(project, "gate");
  const r = await runAtomic(["run", "place.ts", "--input", `gate=${gate}`], { home, cwd: project });
  expect(r.code).toBe(1);
  const id = /started run (\S+)/.exec(r.stdout)![1]!;
  writeFileSync(gate, "");
  return { project, wf, id };
}

const lines = (file: string) => readFileSync(file, "utf8").trim().split("\n");

e2eTest("resume runs the rest in the directory the run started in, not where resume is typed, and says so", async () => {
  const home = makeTempDir();
  const { project, id } = await failedRun(home);
  const elsewhere = makeTempDir();
  const r = await runAtomic(["resume", id], { home, cwd: elsewhere });
  expect(r.code).toBe(0);
  expect(r.stdout).toContain(`resuming in ${project}, where the run started`);
  expect(r.stdout).toMatch(/"text": "here"/);
  expect(lines(join(project, "where.txt"))).toEqual([project, project]);
  expect(existsSync(join(elsewhere, "where.txt"))).toBe(false);
});

e2eTest("a recorded directory that no longer exists: one sentence and a hint; --cwd DIR resumes it there", async () => {
  const home = makeTempDir();
  const { project, wf, id } = await failedRun(home);
  const kept = join(makeTempDir(), "place.ts");
  copyFileSync(wf, kept);
  rmSync(project, { recursive: true, force: true });
  const r = await runAtomic(["resume", id, "--workflow", kept], { home });
  expect(r.code).toBe(2);
  const err = expectOneSentenceError(r.stderr);
  expect(err.message).toBe(`run ${id} started in ${project}, which no longer exists.`);
  expect(err.hint).toContain(`atomic resume ${id} --cwd DIR`);
  const other = makeTempDir();
  // The gate is an absolute path in the inputs (a file, not the run's directory): put it back where the run looks.
  mkdirSync(project, { recursive: true });
  writeFileSync(join(project, "gate"), "");
  const again = await runAtomic(["resume", id, "--workflow", kept, "--cwd", other], { home });
  expect(again.code).toBe(0);
  expect(lines(join(other, "where.txt"))).toEqual([other]);
});

e2eTest("the workflow file moved: resume runs the code the run is pinned to; resume --workflow FILE runs the moved file", async () => {
  const home = makeTempDir();
  const { project, wf, id } = await failedRun(home);
  const moved = join(project, "moved.ts");
  renameSync(wf, moved);
  const r = await runAtomic(["resume", id], { home });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(r.stdout).toMatch(/"text": "here"/);
  const again = await failedRun(home);
  const movedAgain = join(again.project, "moved.ts");
  renameSync(again.wf, movedAgain);
  const ok = await runAtomic(["resume", again.id, "--workflow", movedAgain], { home });
  // Another file than the run's code (its name is part of it): replay checks it.
  expect(ok.stderr).toBe("warning: the workflow file changed since this run started; replay checks that the recorded steps still match\n");
  expect(ok.code).toBe(0);
  expect(ok.stdout).toMatch(/"text": "here"/);
});

e2eTest("resume --workflow with a file that no longer replays is refused as nondeterministic", async () => {
  const home = makeTempDir();
  const { project, id } = await failedRun(home);
  const r = await runAtomic(["resume", id, "--workflow", join(project, "place.ts")], { home, env: { ATOMIC_TEST_STEP: "renamed" } });
  expect(r.code).toBe(1);
  expect(r.stderr).toMatch(/replayed differently at step 0: the workflow now asks for tool "renamed", the journal recorded tool "first"/);
  expect(lines(join(project, "where.txt"))).toEqual([project]);
});
