/**
 * PoolExecutor in its states that need no coordinator (in this process):
 * a pool closed before its first stage (idle → closed) starts nothing
 * afterwards: a stage that still comes fails at once with worker_lost
 * saying the pool was closed, prepare() spawns no coordinator (no worker
 * log directory appears), a message is not delivered, and a control
 * revision is recorded without waiting for an acknowledgement. The states
 * with a coordinator are tested through the real binary (fresh-pool,
 * liveness and pool tests of this folder).
 */

import { afterEach, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { PoolExecutor } from "../../src/pool/pool-executor.ts";
import type { RunnerEvent, StageRequest } from "../../src/runners/types.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterEach(removeTempDirs);

test("closed before its first stage: nothing starts, a stage fails at once naming the closed pool", async () => {
  const home = makeTempDir("atomic-pool-closed-");
  const pool = new PoolExecutor({ home, rootId: "run-closed", rootEpoch: 1, workers: 1 });
  await pool.close();
  pool.prepare();
  const request: StageRequest = {
    runId: "run-closed",
    stageKey: "0",
    stageName: "build",
    attempt: 1,
    runner: "shell",
    cwd: home,
    artifactDir: join(home, "artifacts", "run-closed", "0-build", "attempt-1"),
    workId: "work-1",
  };
  const events: RunnerEvent[] = [];
  const result = await pool.execute(request, new AbortController().signal, (e) => events.push(e));
  expect(result.status).toBe("failed");
  expect(result.error).toEqual({ code: "worker_lost", message: "the worker pool was closed" });
  expect(events).toEqual([]);
  expect(await pool.deliver({ runId: "run-closed", stageKey: "0" }, { id: "m1", text: "hello" }, "steer")).toBe("not_running");
  await pool.applyControl(1, true);
  await pool.close(); // a second close changes nothing
  expect(existsSync(pool.logDir)).toBe(false); // no coordinator was ever spawned (its log lives there)
});
