/**
 * How runs end, through the real binary, and the exit code each ending
 * gives: 1 failed (a stage exits 1; ctx.exit failed or with an unknown
 * status), 3 blocked and 5 skipped (ctx.exit), 4 cancelled (from
 * another process, live or crashed), 130 interrupted (Ctrl-C once: graceful
 * and resumable; twice: at once), and a root killed with SIGKILL shows as
 * crashed while its lease is still valid and resumes at once.
 *
 * Stage processes are followed through the pid file the fixture stage
 * writes; "gone" means no live process is left in the stage's group.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { copyFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import {
  STACK_LINE,
  cleanupNow,
  cleanupWhenIdle,
  e2eTest,
  expectOneSentenceError,
  fixture,
  groupAlive,
  journalCounts,
  listRuns,
  makeTempDir,
  parseNdjson,
  stagePid,
  startedRunId,
} from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const WAITS = fixture("waits.ts");

/** Starts waits.ts and returns once its long stage is running. */
async function startWaiting(home: string, env: Record<string, string> = {}, extraArgs: string[] = [], file = WAITS) {
  const dir = makeTempDir();
  const proc = spawnAtomic(["run", file, ...extraArgs], { home, env: { E2E_DIR: dir, ...env } });
  const out = lineWatcher(proc.stdout);
  const id = startedRunId(await out.waitFor(/^started run /));
  const stage = await stagePid(dir, "wait");
  await out.waitFor(/stage wait started/);
  return { proc, out, id, stage, dir };
}

async function statusOf(home: string, id: string): Promise<Record<string, unknown>> {
  const run = (await listRuns(home)).find((r) => r.id === id);
  if (!run) throw new Error(`run ${id} is not listed`);
  return run;
}

async function waitGroupGone(pgid: number): Promise<void> {
  await waitUntil(() => !groupAlive(pgid), 10_000, `stage process group ${pgid} to end`);
}

// ---------------------------------------------------------------- failed: 1

e2eTest("a shell stage that exits 1 fails the run: exit 1, the error names the stage, a hint to atomic logs", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", fixture("fails.ts")], { home });
  expect(r.code).toBe(1);
  const id = startedRunId(r.stdout);
  expect(r.stderr).toContain(`run ${id} failed: stage "boom" failed: exited with code 1`);
  expect(r.stderr).toMatch(new RegExp(`^hint: .*atomic logs ${id} --stage boom`, "m"));
  expect(r.stderr).not.toMatch(STACK_LINE);
  expect(r.stdout).toMatch(/stage prepare completed/);
  expect(r.stdout).toMatch(/stage boom failed/);

  expect(await statusOf(home, id)).toMatchObject({ status: "failed", error: { message: expect.stringContaining('stage "boom"') } });
  const logs = await runAtomic(["logs", id, "--stage", "boom"], { home });
  expect(logs.code).toBe(0);
  expect(logs.stdout).toContain("about to fail");
  expect(logs.stdout).toContain("broken-on-purpose");
  const show = await runAtomic(["show", id], { home });
  expect(show.stdout).toMatch(/^status\s+failed$/m);
  expect(show.stdout).toMatch(/failed\s+boom #1 .*\n\s+exited with code 1\n/);

  const json = await runAtomic(["run", fixture("fails.ts"), "--json"], { home });
  expect(json.code).toBe(1);
  expect(parseNdjson(json.stdout).at(-1)).toMatchObject({ type: "result", status: "failed", exitCode: 1, error: { code: "exit_code" } });
});

e2eTest("ctx.exit({ status: 'failed' }) ends the run failed with exit 1 and its reason", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", fixture("exit-failed.ts")], { home });
  expect(r.code).toBe(1);
  const id = startedRunId(r.stdout);
  expect(r.stderr).toContain(`run ${id} failed: the check decided to stop`);
  expect(r.stderr).not.toMatch(STACK_LINE);
  expect(await statusOf(home, id)).toMatchObject({ status: "failed" });
});

e2eTest("ctx.exit skipped: exit 5, its reason and outputs; show says reason, runs lists it skipped", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", fixture("exit-as.ts"), "--input", "status=skipped"], { home });
  expect(r.code).toBe(5);
  const id = startedRunId(r.stdout);
  expect(r.stdout).toContain(`run ${id} skipped: nothing to do`);
  expect(r.stdout).toContain('"checked": true');
  expect(await statusOf(home, id)).toMatchObject({ status: "skipped", outputs: { checked: true } });
  const show = await runAtomic(["show", id], { home });
  expect(show.stdout).toMatch(/status\s+skipped\n/);
  expect(show.stdout).toMatch(/reason\s+nothing to do\n/);
  expect(show.stdout).not.toMatch(/^error/m);
  const runs = await runAtomic(["runs", "--status", "skipped"], { home });
  expect(runs.stdout).toMatch(new RegExp(`${id}\\s+skipped\\s+exit-as`));
  const json = await runAtomic(["run", fixture("exit-as.ts"), "--input", "status=skipped", "--json"], { home });
  expect(parseNdjson(json.stdout).at(-1)).toMatchObject({ type: "result", status: "skipped", exitCode: 5 });
});

e2eTest("ctx.exit blocked: exit 3, its reason and the resume command; show and runs say blocked", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", fixture("exit-as.ts"), "--input", "status=blocked", "--input", "reason=waiting for the vendor"], { home });
  expect(r.code).toBe(3);
  const id = startedRunId(r.stdout);
  expect(r.stderr).toContain(`run ${id} blocked: waiting for the vendor\nresume with: atomic resume ${id}`);
  expect(await statusOf(home, id)).toMatchObject({ status: "blocked" });
  const show = await runAtomic(["show", id], { home });
  expect(show.stdout).toMatch(/status\s+blocked\n/);
  expect(show.stdout).toMatch(/reason\s+waiting for the vendor\n/);
  const runs = await runAtomic(["runs", "--status", "blocked"], { home });
  expect(runs.stdout).toMatch(new RegExp(`${id}\\s+blocked\\s+exit-as`));
});

e2eTest("ctx.exit with an unknown status fails the run in one sentence naming the statuses, with a hint", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", fixture("exit-as.ts"), "--input", "status=done"], { home });
  expect(r.code).toBe(1);
  const id = startedRunId(r.stdout);
  expect(r.stderr).toContain(`run ${id} failed: ctx.exit status "done" is not one of completed, failed, cancelled, skipped, blocked`);
  expect(r.stderr).toContain('hint: for example ctx.exit({ status: "skipped", reason: "nothing to do" })');
  expect(r.stderr).not.toMatch(STACK_LINE);
});

e2eTest("workflow code that throws fails the run with exit 1 and its message, no stack trace", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const file = join(dir, "throws.ts");
  writeFileSync(
    file,
    'import { workflow } from "atomic";\nexport default workflow({ name: "throws", async run() { throw new Error("the workflow gave up"); } });\n',
  );
  const r = await runAtomic(["run", file], { home });
  expect(r.code).toBe(1);
  const id = startedRunId(r.stdout);
  expect(r.stderr).toContain(`run ${id} failed: the workflow gave up`);
  expect(r.stderr).not.toMatch(STACK_LINE);
});

// ---------------------------------------------------------------- cancelled: 4

e2eTest("atomic cancel from another process ends a live run cancelled (exit 4) and kills its stage", async () => {
  const home = makeTempDir();
  const { proc, id, stage } = await startWaiting(home);

  // a second driver is refused while this one lives, naming the holder; nothing changes
  const second = await runAtomic(["resume", id], { home });
  expect(second.code).toBe(2);
  expect(expectOneSentenceError(second.stderr).message).toMatch(new RegExp(`run ${id} is being driven by another process .*pid ${proc.pid}`));

  const cancel = await runAtomic(["cancel", id], { home });
  expect(cancel.stderr).toBe("");
  expect(cancel.code).toBe(0);
  expect(cancel.stdout).toBe(`run ${id} cancelled\n`);
  expect(await proc.exited).toBe(4);
  expect(await new Response(proc.stderr).text()).toContain(`run ${id} cancelled`);
  await waitGroupGone(stage);
  expect(await statusOf(home, id)).toMatchObject({ status: "cancelled" });

  const again = await runAtomic(["resume", id], { home });
  expect(again.code).toBe(2);
  expect(expectOneSentenceError(again.stderr).message).toMatch(/was cancelled and cannot be resumed/);
});

// ---------------------------------------------------------------- crashed

e2eTest("a root killed with SIGKILL shows as crashed before its lease expires, and atomic cancel ends it", async () => {
  const home = makeTempDir();
  const wfDir = makeTempDir();
  const workflowFile = join(wfDir, "waits.ts");
  copyFileSync(WAITS, workflowFile);
  const { proc, id } = await startWaiting(home, {}, ["--lease-ms", "600000"], workflowFile);
  proc.kill("SIGKILL");
  await proc.exited;

  const run = await statusOf(home, id);
  expect(run.status).toBe("crashed");
  expect(run.storedStatus).toBe("running");
  // the lease is far from expired: the dead holder process on this host is what gives it away
  expect(run.leaseExpiresAt as number).toBeGreaterThan(Date.now());
  const runs = await runAtomic(["runs"], { home });
  expect(runs.stdout).toMatch(new RegExp(`^${id}\\s+crashed\\s+waits\\s.*driver process gone`, "m"));
  const show = await runAtomic(["show", id], { home });
  expect(show.stdout).toMatch(/^status\s+crashed$/m);
  expect(show.stdout).toContain(`resume with: atomic resume ${id}`);

  // moving it to its workflow file as it is now (--upgrade) when the file is gone is a usage error that writes nothing
  // (a plain resume runs the code the run is pinned to: test/e2e/pinned-code.test.ts)
  const before = journalCounts(home);
  renameSync(workflowFile, `${workflowFile}.moved`);
  const resume = await runAtomic(["resume", id, "--upgrade"], { home });
  expect(resume.code).toBe(2);
  expect(expectOneSentenceError(resume.stderr).message).toMatch(/waits\.ts does not exist/);
  expect(journalCounts(home)).toEqual(before);
  expect((await statusOf(home, id)).status).toBe("crashed");

  const cancel = await runAtomic(["cancel", id], { home });
  expect(cancel.code).toBe(0);
  expect(cancel.stdout).toBe(`run ${id} cancelled\n`);
  expect(await statusOf(home, id)).toMatchObject({ status: "cancelled" });
});

e2eTest("a crashed run resumes at once and completes; finished stages are not re-run", async () => {
  const home = makeTempDir();
  const { proc, id } = await startWaiting(home, {}, ["--lease-ms", "600000"]);
  proc.kill("SIGKILL");
  await proc.exited;
  expect((await statusOf(home, id)).status).toBe("crashed");

  const dir = makeTempDir();
  const resumed = await runAtomic(["resume", id, "--env", `E2E_DIR=${dir}`, "--env", "E2E_SLEEP=0"], { home });
  expect(resumed.stderr).toBe("");
  expect(resumed.code).toBe(0);
  expect(resumed.stdout).toContain(`resumed run ${id}`);
  expect(resumed.stdout).toContain('"waited": "woke"');
  const show = JSON.parse((await runAtomic(["show", id, "--json"], { home })).stdout) as { steps: { name: string; attempts: number; status: string }[] };
  expect(show.steps.map((s) => [s.name, s.status, s.attempts])).toEqual([
    ["first", "completed", 1],
    ["wait", "completed", 2],
  ]);
});

// ---------------------------------------------------------------- interrupted: 130

e2eTest("Ctrl-C once: exit 130, the resume command, the stage is gone, runs says interrupted, resume completes", async () => {
  const home = makeTempDir();
  const { proc, id, stage } = await startWaiting(home);
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(130);
  const stderr = await new Response(proc.stderr).text();
  expect(stderr).toContain(`atomic resume ${id}`);
  expect(stderr).not.toMatch(STACK_LINE);
  await waitGroupGone(stage);

  expect(await statusOf(home, id)).toMatchObject({ status: "interrupted" });
  const runs = await runAtomic(["runs"], { home });
  expect(runs.stdout).toMatch(new RegExp(`^${id}\\s+interrupted\\s`, "m"));

  const dir = makeTempDir();
  const resumed = await runAtomic(["resume", id.slice(0, 12), "--env", `E2E_DIR=${dir}`, "--env", "E2E_SLEEP=0"], { home });
  expect(resumed.stderr).toBe("");
  expect(resumed.code).toBe(0);
  expect(resumed.stdout).toContain('"waited": "woke"');
  expect(resumed.stdout).toMatch(/replayed from the journal/);
  expect(await statusOf(home, id)).toMatchObject({ status: "completed", outputs: { waited: "woke" } });
});

e2eTest("Ctrl-C twice: exits at once with 130 and leaves no stage process", async () => {
  const home = makeTempDir();
  // the stage ignores SIGTERM, so the graceful stop is still waiting when the second Ctrl-C comes
  const { proc, out, id, stage } = await startWaiting(home, { E2E_IGNORE_TERM: "1" });
  proc.kill("SIGINT");
  await out.waitFor(/^Ctrl-C: stopping run/);
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(130);
  expect(await new Response(proc.stderr).text()).toContain(`exiting now; resume with: atomic resume ${id}`);
  await waitGroupGone(stage);

  // nobody drives it any more; it is resumable
  expect((await statusOf(home, id)).status).toBe("crashed");
  const dir = makeTempDir();
  const resumed = await runAtomic(["resume", id, "--env", `E2E_DIR=${dir}`, "--env", "E2E_SLEEP=0"], { home });
  expect(resumed.code).toBe(0);
  expect(resumed.stdout).toContain('"waited": "woke"');
});
