/**
 * A lost coordinator does not burn the stage's infrastructure retries
 * (issue 13 item 9), through the real binary: the coordinator is killed
 * with SIGKILL mid-stage three times in a row. Each retry runs on a fresh
 * pool (a new coordinator, counted in the coordinator's log, which every
 * coordinator of the drive appends to); after the third the run fails
 * resumably with worker_lost, and its messages name the log once. Resume
 * then completes it. Nothing here asserts a duration.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { lastRun, show, stage } from "./support.ts";

const ONE = join(import.meta.dir, "fixtures", "one-stage.ts");

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

const lines = (path: string) => (existsSync(path) ? readFileSync(path, "utf8").split("\n").filter(Boolean) : []);

e2eTest(
  "the coordinator SIGKILLed mid-stage three times: each retry gets a fresh pool; the failure names the log once; resume completes",
  async () => {
    const home = makeTempDir();
    const d = makeTempDir();
    // Each attempt records its worker; until the file "pass" exists the stage then waits to be killed.
    const command = `echo $PPID >> ${d}/workers; if [ ! -f ${d}/pass ]; then sleep 60; fi; echo result`;
    const proc = spawnAtomic(["run", ONE, "--input", `command=${command}`, "--workers", "1"], { home });
    const coordinators: number[] = [];
    for (let i = 1; i <= 3; i++) {
      const worker = Number((await waitUntil(() => lines(`${d}/workers`)[i - 1], 30_000, `attempt ${i} to start`))!);
      const coordinator = parentOf(worker);
      coordinators.push(coordinator);
      process.kill(coordinator, "SIGKILL");
    }
    expect(await proc.exited).toBe(1);
    const output = (await new Response(proc.stdout).text()) + (await new Response(proc.stderr).text());
    // three attempts, three coordinators
    expect(lines(`${d}/workers`).length).toBe(3);
    expect(new Set(coordinators).size).toBe(3);
    const run = await lastRun(home);
    const log = join(home, "artifacts", run.id, "worker-logs", "coordinator.log");
    expect(readFileSync(log, "utf8").match(/ coordinator ready: /g)?.length).toBe(3);
    // the failure says where the log is, once
    expect(output.split(log).length - 1).toBe(1);
    const report = await show(home, run.id);
    expect(report.run.status).toBe("failed");
    expect(report.run.error.code).toBe("worker_lost");
    expect(stage(report, "work").attemptLog.map((a: Record<string, any>) => a.error?.code)).toEqual(["worker_lost", "worker_lost", "worker_lost"]);

    Bun.spawnSync(["touch", `${d}/pass`]);
    const resumed = await runAtomic(["resume", run.id], { home });
    expect(resumed.code).toBe(0);
    expect((await show(home, run.id)).run.outputs).toEqual({ text: "result", exitCode: 0 });
  },
  120_000,
);
