/**
 * Runs pinned to their code (issue 26), through dist/atomic on the
 * journal under test: a run parked on `ctx.ask` whose workflow file and
 * local module are edited (a stage's arguments changed, a stage deleted)
 * completes with the code it started with once answered; `show --code`
 * prints that code, `runs` its short version; `resume --upgrade` moves it
 * to the edited file and fails naming the step that differs; the file
 * deleted, resume still runs the pinned copy, and so does a rerun; gc
 * takes the code away with the last run that used it; `--upgrade` of a
 * completed run is one sentence and changes nothing.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { cpSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

/** A copy of the fixture project and a run of it parked on its question (stopped with SIGTERM while it waits). */
async function parkedRun(home: string) {
  const project = makeTempDir("atomic-pinned-");
  cpSync(fixture("pinned"), project, { recursive: true });
  const wf = join(project, "flow.ts");
  const proc = spawnAtomic(["--json", "run", wf], { home, cwd: project });
  const out = lineWatcher(proc.stdout);
  const started = await out.waitFor(/"type":"run_started"/);
  const id = JSON.parse(started).runId as string;
  await out.waitFor(/"kind":"ask"/);
  proc.kill("SIGTERM");
  await proc.exited;
  const inbox = JSON.parse((await runAtomic(["--json", "inbox", id], { home })).stdout);
  return { project, wf, id, promptId: inbox.prompts[0].id as string };
}

/** The edit of the tests: the local module's value, the second stage's command, the third stage deleted. */
function editProject(project: string) {
  writeFileSync(join(project, "lib", "greeting.ts"), 'export const greeting = "new";\n');
  const wf = join(project, "flow.ts");
  writeFileSync(
    wf,
    readFileSync(wf, "utf8")
      .replace("`echo ${greeting}-${answer}`", "`echo ${greeting}+${answer}`")
      .replace('const third = await ctx.shell("third", "echo three");', "const third = { text: \"gone\" };"),
  );
}

const outputsOf = (stdout: string) => JSON.parse(stdout.trim().split("\n").at(-1)!).outputs;

e2eTest("a parked run whose file and module changed completes with the code it started with; show --code prints it, runs its version", async () => {
  const home = makeTempDir();
  const { project, id, promptId } = await parkedRun(home);
  const original = readFileSync(join(project, "flow.ts"), "utf8");
  editProject(project);
  expect((await runAtomic(["answer", id, promptId, "yes"], { home })).code).toBe(0);
  const r = await runAtomic(["--json", "resume", id], { home });
  expect(r.code).toBe(0);
  expect(outputsOf(r.stdout)).toEqual({ first: "old", prepare: "prepare-old", second: "old-yes", third: "three" });
  // No warning that the file changed: the run did not run it.
  expect(r.stderr).not.toContain("changed since this run started");

  const code = await runAtomic(["show", id, "--code"], { home });
  expect(code.code).toBe(0);
  const version = JSON.parse((await runAtomic(["--json", "runs"], { home })).stdout.split("\n")[0]!).workflowDigest as string;
  expect(code.stdout).toStartWith(`code ${version.slice(0, 10)} of ${join(project, "flow.ts")} (2 files, paths relative to its directory)\n`);
  expect(code.stdout).toContain(`--- flow.ts\n${original.trimEnd()}\n`);
  expect(code.stdout).toContain('--- lib/greeting.ts\nexport const greeting = "old";\n');
  const json = JSON.parse((await runAtomic(["--json", "show", id, "--code"], { home })).stdout);
  expect(json.files.map((f: { path: string }) => f.path)).toEqual(["flow.ts", "lib/greeting.ts"]);
  const runs = await runAtomic(["runs"], { home, env: { COLUMNS: "300" } });
  expect(runs.stdout).toMatch(/\bCODE\b/);
  expect(runs.stdout).toContain(version.slice(0, 10));

  // --upgrade of a completed run: one sentence, a hint, exit 2, nothing recorded.
  const before = JSON.parse((await runAtomic(["--json", "show", id], { home })).stdout).run.lastSeq;
  const upgrade = await runAtomic(["resume", id, "--upgrade"], { home });
  expect(upgrade.code).toBe(2);
  const err = expectOneSentenceError(upgrade.stderr);
  expect(err.message).toBe(`run ${id} already completed; there is nothing to move to the current file.`);
  expect(err.hint).toBe(`start it again on the current file: atomic rerun ${id}`);
  expect(JSON.parse((await runAtomic(["--json", "show", id], { home })).stdout).run.lastSeq).toBe(before);
});

e2eTest("resume --upgrade moves the run to the edited file: the changed stage is named as the step that differs", async () => {
  const home = makeTempDir();
  const { project, id, promptId } = await parkedRun(home);
  editProject(project);
  await runAtomic(["answer", id, promptId, "yes"], { home });
  const r = await runAtomic(["resume", id, "--upgrade"], { home });
  expect(r.code).toBe(1);
  expect(r.stderr).toContain("the run moves to the current workflow file (--upgrade)");
  expect(r.stderr).toContain('replayed differently at step 1: the workflow now asks for stage "prepare" with arguments digest');
  // The call site in both versions, and the ways on.
  expect(r.stderr).toMatch(/\(now called at flow\.ts:14:\d+; recorded from flow\.ts:14 of the pinned code\)\n/);
  expect(r.stderr).toContain(
    `hint: wrap the change in if (ctx.patched("some-id")) { new code } else { old code }, fork the run from before the step: atomic fork ${id} --at prepare, or resume it without --upgrade: it keeps the code it is pinned to\n`,
  );
  // The failed upgrade left the run on its pinned code: a plain resume completes it with the old code.
  const plain = await runAtomic(["--json", "resume", id], { home });
  expect(plain.code).toBe(0);
  expect(outputsOf(plain.stdout)).toEqual({ first: "old", prepare: "prepare-old", second: "old-yes", third: "three" });
});

e2eTest("the workflow file deleted: resume runs the pinned copy, a rerun too; gc takes the code away with the last run", async () => {
  const home = makeTempDir();
  const { project, id, promptId } = await parkedRun(home);
  rmSync(project, { recursive: true });
  await runAtomic(["answer", id, promptId, "yes"], { home });
  // The run's directory is gone too: --cwd names another; the code needs nothing of the old one.
  const elsewhere = makeTempDir();
  const r = await runAtomic(["--json", "resume", id, "--cwd", elsewhere], { home });
  expect(r.code).toBe(0);
  expect(outputsOf(r.stdout)).toEqual({ first: "old", prepare: "prepare-old", second: "old-yes", third: "three" });
  expect(readdirSync(join(home, "code")).length).toBe(1);

  // A rerun of it runs the pinned code too (the file is gone), and shares it: stored once.
  const rerun = spawnAtomic(["--json", "rerun", id, "--cwd", elsewhere], { home });
  const out = lineWatcher(rerun.stdout);
  const rerunId = JSON.parse(await out.waitFor(/"type":"run_started"/)).runId as string;
  await out.waitFor(/"kind":"ask"/);
  rerun.kill("SIGTERM");
  await rerun.exited;
  const listed = (await runAtomic(["--json", "runs"], { home })).stdout.trim().split("\n").map((l) => JSON.parse(l));
  expect(new Set(listed.map((x: { workflowDigest: string }) => x.workflowDigest)).size).toBe(1);

  // gc of the first run keeps the code the parked rerun still uses ...
  const gc = await runAtomic(["gc", "--older-than", "0s"], { home });
  expect(gc.code).toBe(0);
  expect(gc.stdout).not.toContain("pinned code");
  expect((await runAtomic(["show", rerunId, "--code"], { home })).code).toBe(0);
  // ... and takes it away with the last run that used it.
  expect((await runAtomic(["cancel", rerunId], { home })).code).toBe(0);
  const last = await runAtomic(["gc", "--older-than", "0s", "--status", "cancelled"], { home });
  expect(last.code).toBe(0);
  expect(last.stdout).toContain("deleted 3 pinned code files no remaining run uses");
  expect(readdirSync(join(home, "code"))).toEqual([]);
});

e2eTest("fix-and-continue: a failing stage fixed in the file, resume --upgrade completes without running the recorded stage again", async () => {
  const home = makeTempDir();
  const project = makeTempDir("atomic-pinned-");
  const wf = join(project, "fix.ts");
  const count = join(project, "one.count");
  const source = (second: string) =>
    `import { workflow } from "atomic";\nexport default workflow({ name: "fix", async run(ctx) {\n` +
    `  await ctx.shell("one", "echo ran >> ${count}");\n  const two = await ctx.shell("two", ${JSON.stringify(second)});\n  return { two: two.text.trim() };\n} });\n`;
  writeFileSync(wf, source("echo broken >&2; exit 3"));
  const failed = await runAtomic(["--json", "run", wf], { home, cwd: project });
  expect(failed.code).toBe(1);
  const id = JSON.parse(failed.stdout.split("\n")[0]!).runId as string;
  writeFileSync(wf, source("echo fixed"));
  // Without --upgrade the run is still on the code that fails.
  expect((await runAtomic(["resume", id], { home })).code).toBe(1);
  const fixed = await runAtomic(["--json", "resume", id, "--upgrade"], { home });
  expect(fixed.code).toBe(0);
  expect(outputsOf(fixed.stdout)).toEqual({ two: "fixed" });
  expect(readFileSync(count, "utf8")).toBe("ran\n");
  // From now on the run is pinned to the fixed code.
  expect((await runAtomic(["show", id, "--code"], { home })).stdout).toContain('ctx.shell("two", "echo fixed")');
});

e2eTest("with ctx.patched around the changes, resume --upgrade replays the recorded old path and takes the new branch past it", async () => {
  const home = makeTempDir();
  const { project, id, promptId } = await parkedRun(home);
  writeFileSync(
    join(project, "flow.ts"),
    `import { workflow } from "atomic";
export default workflow({
  name: "pinned",
  async run(ctx) {
    const first = await ctx.tool("first", {}, () => "old");
    const prepare = ctx.patched("prepare-v2") ? await ctx.shell("prepare", "echo prepare-v2") : await ctx.shell("prepare", "echo prepare-old");
    const answer = await ctx.ask("go on?");
    const second = ctx.patched("second-v2") ? await ctx.shell("second", \`echo v2-\${answer}\`) : await ctx.shell("second", \`echo old-\${answer}\`);
    return { first, prepare: prepare.text.trim(), second: second.text.trim(), third: "deleted" };
  },
});
`,
  );
  await runAtomic(["answer", id, promptId, "yes"], { home });
  const r = await runAtomic(["--json", "resume", id, "--upgrade"], { home });
  expect(r.code).toBe(0);
  expect(outputsOf(r.stdout)).toEqual({ first: "old", prepare: "prepare-old", second: "v2-yes", third: "deleted" });
  const events = JSON.parse((await runAtomic(["--json", "show", id], { home })).stdout);
  expect(events.run.status).toBe("completed");
});
