/**
 * A pool never hangs (issue 12, item 5), through the real binary: fault
 * points armed in the worker just before it sends its result
 * (`worker-before-commit`) and in the coordinator between committing a
 * result and telling the root (`coordinator-before-work-done`), killed
 * (SIGKILL) or throwing; and a worker that holds other work than its
 * coordinator believes. Each run completes, or fails resumably and resume
 * completes it; no process of the run is left. Nothing asserts a duration:
 * a hang is the test's own timeout.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";
import { lastRun, processesWithHome, show, stage } from "./support.ts";

const FIX = join(import.meta.dir, "fixtures");
const ONE = join(FIX, "one-stage.ts");

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

function coordinatorLog(home: string, runId: string): string {
  return readFileSync(join(home, "artifacts", runId, "worker-logs", "coordinator.log"), "utf8");
}

async function noProcessLeft(home: string): Promise<void> {
  await waitUntil(() => processesWithHome(home).length === 0, 15_000, "every process of the run to exit");
}

/** Run `command` on the pool with `faults` armed: it fails resumably with `code`; resume (unarmed) completes it. */
async function failsThenResumes(faults: Record<string, string>, code: string): Promise<{ error: { code: string; message: string } }> {
  const home = makeTempDir();
  const r = await runAtomic(["run", ONE, "--input", "command=echo result", "--workers", "2", "--work-lease-ms", "2000"], { home, env: faults });
  expect(r.code).toBe(1);
  expect(r.stderr).not.toMatch(/^\s+at /m);
  const run = await lastRun(home);
  expect(run.status).toBe("failed");
  const { error } = (await show(home, run.id)).run;
  expect(error.code).toBe(code);
  await noProcessLeft(home);
  const resumed = await runAtomic(["resume", run.id], { home });
  expect(resumed.code).toBe(0);
  expect((await show(home, run.id)).run.outputs).toEqual({ text: "result", exitCode: 0 });
  await noProcessLeft(home);
  return { error };
}

e2eTest("worker-before-commit, SIGKILL: every worker dies before its result goes out; worker_retry_limit, resume completes", async () => {
  await failsThenResumes({ ATOMIC_FAULT_POINTS: "worker-before-commit:1" }, "worker_retry_limit");
});

e2eTest("worker-before-commit, the send throws: the worker reports it, the item is given back each time; worker_retry_limit, resume completes", async () => {
  const { error } = await failsThenResumes({ ATOMIC_FAULT_POINTS: "worker-before-commit:1", ATOMIC_FAULT_ACTION: "throw" }, "worker_retry_limit");
  expect(error.message).toMatch(/lost its worker \S+ \(it could not send its result: fault point worker-before-commit fired\)/);
});

e2eTest("the coordinator SIGKILLed between committing a result and telling the root: worker_lost, resume completes", async () => {
  const home = makeTempDir();
  const env = { ATOMIC_FAULT_POINTS: "coordinator-before-work-done:1" };
  const r = await runAtomic(["run", ONE, "--input", "command=echo result", "--workers", "2", "--work-lease-ms", "2000"], { home, env });
  expect(r.stderr).not.toMatch(/^\s+at /m);
  const run = await lastRun(home);
  if (r.code === 0) {
    // A slow stage (a busy machine) makes the root ask where its work is (work_status) before the commit's own
    // continuation runs (on this attempt or a retry's fresh pool): the answer carries the committed result, and the
    // coordinator dies after it. Nothing is lost: the committed result is the run's.
    const report = await show(home, run.id);
    expect(report.run.outputs).toEqual({ text: "result", exitCode: 0 });
    expect(stage(report, "work").status).toBe("completed");
    await noProcessLeft(home);
    return;
  }
  expect(r.code).toBe(1);
  expect(run.status).toBe("failed");
  expect((await show(home, run.id)).run.error.code).toBe("worker_lost");
  await noProcessLeft(home);
  const resumed = await runAtomic(["resume", run.id], { home });
  expect(resumed.code).toBe(0);
  expect((await show(home, run.id)).run.outputs).toEqual({ text: "result", exitCode: 0 });
  await noProcessLeft(home);
});

e2eTest("the coordinator commits a result but cannot tell the root: the root asks (work_status), gets it, and the run completes", async () => {
  const home = makeTempDir();
  const env = { ATOMIC_FAULT_POINTS: "coordinator-before-work-done:1", ATOMIC_FAULT_ACTION: "throw" };
  const r = await runAtomic(["run", ONE, "--input", "command=echo result", "--workers", "2", "--work-lease-ms", "2000"], { home, env });
  expect(r.code).toBe(0);
  const run = await lastRun(home);
  const report = await show(home, run.id);
  expect(report.run.outputs).toEqual({ text: "result", exitCode: 0 });
  const work = stage(report, "work");
  expect([work.status, work.generation, work.attempts ?? 1]).toEqual(["completed", 1, 1]);
  expect(coordinatorLog(home, run.id)).toMatch(/after committing work \S+: fault point coordinator-before-work-done fired/);
  await noProcessLeft(home);
});

e2eTest("a worker that holds other work than its coordinator believes (it dropped a start it could not read) loses the slot; the run ends", async () => {
  const home = makeTempDir();
  const r = await runAtomic(["run", join(FIX, "unreadable-start.ts"), "--workers", "2", "--work-lease-ms", "2000"], { home });
  expect(r.code).toBe(1);
  const run = await lastRun(home);
  expect((await show(home, run.id)).run.error.code).toBe("worker_retry_limit");
  expect(coordinatorLog(home, run.id)).toMatch(/worker \S+ answered a ping about work \S+ holding no work/);
  await noProcessLeft(home);
}, 90_000);
