/**
 * How many workers a root's pool starts, through the real binary: one with
 * the pool, another each time a stage waits beside busy workers, up to
 * `--workers N` (src/pool/supervisor.ts, docs/design/pool.md "How many
 * workers"). Each worker writes a log of its own under the run's
 * worker-logs, so the logs count the workers started. Stages wait on gate
 * files the test writes; nothing here asserts a duration.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, journalFreeTest } from "../e2e/support.ts";

const FIX = join(import.meta.dir, "fixtures");
const ONE = join(FIX, "one-stage.ts");
const GATED = join(FIX, "gated-fanout.ts");

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

/** The ids of the workers a run's pool started (their logs). */
function workersOf(home: string, runId: string): string[] {
  return readdirSync(join(home, "artifacts", runId, "worker-logs"))
    .filter((f) => f !== "coordinator.log")
    .map((f) => f.replace(/\.log$/, ""));
}

/** A gated fan-out of `n` stages on `workers` workers: once `running` of them started at once, all are let go. */
async function gatedRun(n: number, workers: number, running: number): Promise<{ home: string; runId: string; started: string[] }> {
  const home = makeTempDir("atomic-worker-starts-");
  const dir = makeTempDir("atomic-worker-starts-d-");
  const proc = spawnAtomic(["run", GATED, "--workers", String(workers), "--input", `dir=${dir}`, "--input", `n=${n}`, "--json"], { home });
  const names = Array.from({ length: n }, (_, i) => `g${i}`);
  const startedNow = () => names.filter((g) => existsSync(join(dir, `${g}.started`)));
  await waitUntil(() => startedNow().length >= running, 60_000, `${running} stages running at once`);
  const started = startedNow();
  for (const g of names) writeFileSync(join(dir, `go-${g}`), "");
  expect(await proc.exited).toBe(0);
  const result = JSON.parse((await new Response(proc.stdout).text()).trim().split("\n").pop()!);
  return { home, runId: result.runId, started };
}

journalFreeTest("a one-stage run starts one worker, whatever --workers allows", async () => {
  const home = makeTempDir("atomic-worker-starts-");
  const r = await runAtomic(["run", ONE, "--input", "command=echo result", "--workers", "2", "--json"], { home });
  expect(r.code).toBe(0);
  const result = JSON.parse(r.stdout.trim().split("\n").pop()!);
  expect(result.outputs.text).toBe("result");
  expect(workersOf(home, result.runId)).toHaveLength(1);
});

journalFreeTest("stages waiting beside busy workers get workers of their own, up to --workers: four stages at once on --workers 3 start three", async () => {
  const { home, runId, started } = await gatedRun(4, 3, 3);
  // three ran at once (each holding its worker until the gates opened), the fourth waited for one of them
  expect(started).toHaveLength(3);
  const ids = workersOf(home, runId);
  expect(ids).toHaveLength(3);
  expect(ids.map((id) => id.split("-")[0]).sort()).toEqual(["w1", "w2", "w3"]);
});
