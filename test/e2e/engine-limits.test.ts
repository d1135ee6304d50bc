/**
 * Limits and steps the engine must honour, through the real binary:
 * - `--max-duration` ends the run: a looping shell stage is cancelled (its
 *   process group gone), nothing after it starts, the run ends blocked
 *   (exit 3) naming the time budget, and `resume --max-duration 1m`
 *   continues it; a ctx.tool running at the limit sees its signal abort;
 * - a ctx.tool that ignores its abort signal: `atomic cancel` and Ctrl-C
 *   still end the run (cancelled, exit 4; interrupted, exit 130), the
 *   driver saying it abandoned the tool's promise;
 * - tool steps: a running tool is visible in `show`; every failed attempt
 *   is recorded with its error; NonRetryableError and a ReferenceError in
 *   the tool's own code are not retried;
 * - a ctx.sleep interrupted before its end shows as waiting with its
 *   wake-up time, and resumed with the wall clock set back ten minutes
 *   (libfaketime) it waits only what was left of its duration.
 * Nothing here asserts a duration: a bug shows as a test timing out.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { removeStaleFaketimeSegments } from "../helpers/faketime.ts";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, groupAlive, makeTempDir, stagePid, startedRunId } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(async () => {
  await cleanupNow();
  removeStaleFaketimeSegments();
});

const LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

async function showJson(home: string, id: string) {
  const r = await runAtomic(["show", id, "--json"], { home });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as {
    run: { status: string; error: { code: string; message: string } | null };
    steps: { name: string; kind: string; status: string; attempts: number; wakeAt?: number; attemptLog: { attempt: number; status: string; error?: { message: string } }[] }[];
  };
}

/** Starts a run in the background and returns once its id is printed. */
async function startRun(home: string, file: string, env: Record<string, string>, args: string[] = []) {
  const proc = spawnAtomic(["run", file, ...args], { home, env });
  const out = lineWatcher(proc.stdout);
  const id = startedRunId(await out.waitFor(/^started run /));
  return { proc, out, id };
}

// ---------------------------------------------------------------- --max-duration

// 5 s, not less: the budget counts from the run's start, and the stage must have started (the pool boots on
// a loaded machine too) before it is used up.
e2eTest("--max-duration 5s stops a looping shell stage: blocked (exit 3), no stage process left; resume --max-duration 1m completes", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const { proc, id } = await startRun(home, fixture("loops.ts"), { E2E_DIR: dir, E2E_LOOP: "1" }, ["--max-duration", "5s"]);
  const stage = await stagePid(dir, "loop");
  expect(await proc.exited).toBe(3);
  const stderr = await new Response(proc.stderr).text();
  expect(stderr).toContain(`run ${id} blocked: run ${id}: the time budget of 5.0 s is used up`);
  expect(stderr).toContain("--max-duration");
  expect(groupAlive(stage)).toBe(false);
  expect(existsSync(join(dir, "after"))).toBe(false);
  const shown = await showJson(home, id);
  expect(shown.run.status).toBe("blocked");
  expect(shown.run.error!.code).toBe("budget_exceeded");

  // The stage loops while E2E_LOOP is set: the run started with it, this drive sets it empty.
  const resumed = await runAtomic(["resume", id, "--max-duration", "1m", "--json", "--env", "E2E_LOOP="], { home });
  expect(resumed.code).toBe(0);
  expect(JSON.parse(resumed.stdout.trim().split("\n").at(-1)!).outputs).toEqual({ done: true });
  expect(existsSync(join(dir, "after"))).toBe(true);
});

e2eTest("a ctx.tool running when --max-duration is used up sees its signal abort; the run ends blocked", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const r = await runAtomic(["run", fixture("tool-signals.ts"), "--max-duration", "2s"], { home, env: { E2E_DIR: dir, E2E_TOOL: "honours" } });
  expect(r.code).toBe(3);
  expect(readFileSync(join(dir, "aborted"), "utf8")).toMatch(/the time budget of 2\.0 s is used up/);
  const id = startedRunId(r.stdout);
  const shown = await showJson(home, id);
  expect(shown.run.error!.code).toBe("budget_exceeded");
});

// ---------------------------------------------------------------- a tool that ignores its signal

e2eTest("atomic cancel ends a run whose ctx.tool ignores its abort signal: cancelled (exit 4), the promise abandoned", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const { proc, id } = await startRun(home, fixture("tool-signals.ts"), { E2E_DIR: dir, E2E_TOOL: "ignores" });
  await waitUntil(() => existsSync(join(dir, "stubborn")), 30_000, "the stubborn tool to start");
  const cancel = await runAtomic(["cancel", id], { home });
  expect(cancel.stderr).toBe("");
  expect(cancel.stdout).toBe(`run ${id} cancelled\n`);
  expect(cancel.code).toBe(0);
  expect(await proc.exited).toBe(4);
  const stderr = await new Response(proc.stderr).text();
  expect(stderr).toContain('tool "stubborn" ignored its abort signal for 2 s: its promise was abandoned');
  expect((await showJson(home, id)).run.status).toBe("cancelled");
});

e2eTest("Ctrl-C ends a run whose ctx.tool ignores its abort signal: interrupted (exit 130), resumable", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const { proc, id } = await startRun(home, fixture("tool-signals.ts"), { E2E_DIR: dir, E2E_TOOL: "ignores" });
  await waitUntil(() => existsSync(join(dir, "stubborn")), 30_000, "the stubborn tool to start");
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(130);
  const stderr = await new Response(proc.stderr).text();
  expect(stderr).toContain('tool "stubborn" ignored its abort signal');
  expect(stderr).toContain(`resume with: atomic resume ${id}`);
  expect((await showJson(home, id)).run.status).toBe("interrupted");
});

// ---------------------------------------------------------------- tool attempts

e2eTest("tool steps: a running tool shows in `show`; failed attempts are recorded with their errors; permanent errors are not retried", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const { proc, id } = await startRun(home, fixture("tool-attempts.ts"), { E2E_DIR: dir });
  await waitUntil(() => existsSync(join(dir, "held")), 30_000, "the held tool to start");
  const running = await waitUntil(async () => {
    const step = (await showJson(home, id)).steps.find((s) => s.name === "held");
    return step?.status === "running" ? step : undefined;
  }, 30_000, "show to list the held tool as running");
  expect(running!.kind).toBe("tool");
  expect((await runAtomic(["show", id], { home })).stdout).toMatch(/running\s+tool held/);
  writeFileSync(join(dir, "release"), "");
  expect(await proc.exited).toBe(0);

  const shown = await showJson(home, id);
  const step = (name: string) => shown.steps.find((s) => s.name === name)!;
  expect(step("flaky").attemptLog.map((a) => [a.attempt, a.status, a.error?.message])).toEqual([
    [1, "failed", "boom 1"],
    [2, "failed", "boom 2"],
    [3, "completed", undefined],
  ]);
  expect(step("permanent").attempts).toBe(1);
  expect(step("permanent").attemptLog[0]!.error!.message).toBe("no such user");
  expect(step("bug").attempts).toBe(1);
  expect(step("bug").attemptLog[0]!.error!.message).toContain("notDefinedAnywhere");
  const text = (await runAtomic(["show", id], { home })).stdout;
  expect(text).toContain("attempt 1 failed: boom 1");
  expect(text).toContain("attempt 2 failed: boom 2");
  // A stage's failed attempt is listed the same way.
  expect(step("shaky").attemptLog.map((a) => a.status)).toEqual(["failed", "completed"]);
  expect(text).toMatch(/shaky .*attempts 2[\s\S]*attempt 1 failed: /);
});

// ---------------------------------------------------------------- sleeps

/** Runs naps.ts and interrupts it (Ctrl-C) while it sleeps. */
async function interruptedNap(home: string): Promise<string> {
  const { proc, out, id } = await startRun(home, fixture("naps.ts"), {});
  await out.waitFor(/sleep nap started/);
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(130);
  return id;
}

e2eTest("a sleep interrupted before its end shows as waiting until its wake-up time, not completed", async () => {
  const home = makeTempDir();
  const id = await interruptedNap(home);
  const nap = (await showJson(home, id)).steps.find((s) => s.name === "nap")!;
  expect(nap.status).toBe("waiting");
  expect(typeof nap.wakeAt).toBe("number");
  const text = (await runAtomic(["show", id], { home })).stdout;
  expect(text).toMatch(new RegExp(`waiting\\s+sleep nap .*until ${new Date(nap.wakeAt!).toISOString().replace("T", " ").slice(0, 19)}`));
});

e2eTest("a sleep resumed with the wall clock set back 10 minutes (libfaketime) waits only what was left of its 4 s", async () => {
  expect(existsSync(LIBFAKETIME)).toBe(true); // scripts/install-faketime.sh installs it
  const home = makeTempDir();
  const id = await interruptedNap(home);
  // The wall clock ten minutes back: wakeAt - now is over ten minutes; the sleep is 4 s.
  const resumed = await runAtomic(["resume", id, "--json"], {
    home,
    env: { LD_PRELOAD: LIBFAKETIME, FAKETIME: "-10m" },
    timeoutMs: 60_000,
  });
  expect(resumed.code).toBe(0);
  expect(JSON.parse(resumed.stdout.trim().split("\n").at(-1)!).outputs).toEqual({ napped: true });
}, 90_000);
