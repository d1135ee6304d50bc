/**
 * ctx.continueAsNew (issue 26), through dist/atomic on the journal under
 * test: a loop of tool steps that continues as a new run every `every`
 * steps runs as a chain of bounded runs (`runs` lists each, `continued`
 * but the last; `show` names each one's neighbours), and `atomic run`
 * follows the chain to the last run's outputs. Killed with SIGKILL around
 * the hand-over (after it is recorded, after the next run started) and at
 * a random step, `atomic resume <first run>` follows the chain and ends
 * with the outputs of an uninterrupted run, with exactly one run per
 * segment. The next run picks up the workflow file as it is at the
 * hand-over (edited while the first run waited), the first keeps its own. Bad input: inputs the workflow refuses, a call in a child
 * workflow: the run fails with one sentence, and no next run is made.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const FLOW = fixture("continues.ts");
const TOTAL = 500;
const EVERY = 100;
const SEGMENTS = TOTAL / EVERY;

/** The outputs of the loop, computed here. */
function expected(): { done: number; sum: number } {
  let sum = 0;
  for (let i = 0; i < TOTAL; i++) sum += (i * i) % 7;
  return { done: TOTAL, sum };
}

const lastLine = (stdout: string) => JSON.parse(stdout.trim().split("\n").at(-1)!) as { type: string; runId: string; status: string; outputs: unknown };

interface Listed {
  id: string;
  status: string;
  storedStatus: string;
  workflowName: string;
  lastSeq: number;
  createdAt: number;
}

async function chainRuns(home: string): Promise<Listed[]> {
  const r = await runAtomic(["--json", "runs", "--workflow", "continues", "--limit", "100"], { home });
  expect(r.code).toBe(0);
  return r.stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as Listed).reverse();
}

/** Every run of the chain holds at most one segment's steps: `every` tool checkpoints plus a few records of its own. */
async function expectBounded(home: string, runs: Listed[]): Promise<void> {
  for (const run of runs) {
    const show = JSON.parse((await runAtomic(["--json", "show", run.id, "--all"], { home })).stdout) as { steps: { kind: string }[] };
    expect(show.steps.filter((s) => s.kind === "tool").length).toBeLessThanOrEqual(EVERY);
  }
}

const start = (home: string, env: Record<string, string> = {}) =>
  runAtomic(["--json", "run", FLOW, "--input", `total=${TOTAL}`, "--input", `every=${EVERY}`], { home, env, timeoutMs: 90_000 });

e2eTest("a loop that continues as new runs as a chain of bounded runs, followed to its end by atomic run; runs and show give the chain", async () => {
  const home = makeTempDir();
  const r = await start(home);
  expect(r.code).toBe(0);
  const result = lastLine(r.stdout);
  expect(result.type).toBe("result");
  expect(result.outputs).toEqual(expected());
  const handOvers = r.stdout.split("\n").filter((l) => l.includes('"type":"continued"'));
  expect(handOvers.length).toBe(SEGMENTS - 1);

  const runs = await chainRuns(home);
  expect(runs.length).toBe(SEGMENTS);
  expect(runs.map((x) => x.status)).toEqual([...Array(SEGMENTS - 1).fill("continued"), "completed"]);
  expect(runs.at(-1)!.id).toBe(result.runId);
  await expectBounded(home, runs);

  // show names each run's neighbours; the text list names the next run.
  const first = await runAtomic(["show", runs[0]!.id], { home });
  expect(first.stdout).toMatch(/status\s+continued/);
  expect(first.stdout).toContain(`continued as run ${runs[1]!.id}`);
  expect(first.stdout).not.toMatch(/^error/m);
  const second = await runAtomic(["show", runs[1]!.id], { home });
  expect(second.stdout).toMatch(new RegExp(`continues\\s+run ${runs[0]!.id}`));
  const list = await runAtomic(["runs"], { home, env: { COLUMNS: "300" } });
  expect(list.stdout).toContain(`continued as run ${runs[1]!.id}`);

  // resume of a run of a finished chain: its last run completed, nothing to resume.
  const again = await runAtomic(["resume", runs[0]!.id], { home });
  expect(again.code).toBe(2);
  expect(again.stderr).toContain(`run ${result.runId} already completed`);
}, 120_000);

for (const [point, hit] of [
  ["continue-as-new-recorded", 2],
  ["continue-as-new-started", 3],
  ["after-checkpoint", 1 + Math.floor(Math.random() * TOTAL)],
] as const) {
  e2eTest(`killed with SIGKILL at ${point} #${hit}, atomic resume of the first run follows the chain to the outputs of an uninterrupted run, one run per segment`, async () => {
    const home = makeTempDir();
    const killed = await start(home, { ATOMIC_FAULT_POINTS: `${point}:${hit}` });
    expect(killed.code).not.toBe(0);
    expect(killed.stderr).toContain(`[fault] ${point} #${hit}: SIGKILL`);
    const firstId = (await chainRuns(home))[0]!.id;
    const resumed = await runAtomic(["--json", "resume", firstId], { home, timeoutMs: 90_000 });
    expect(resumed.code).toBe(0);
    expect(lastLine(resumed.stdout).outputs).toEqual(expected());
    const runs = await chainRuns(home);
    expect(runs.length).toBe(SEGMENTS);
    expect(runs.map((x) => x.status)).toEqual([...Array(SEGMENTS - 1).fill("continued"), "completed"]);
    await expectBounded(home, runs);
  }, 120_000);
}

e2eTest("continueAsNew with inputs the workflow refuses, or in a child workflow: the run fails with one sentence, exit 2, and no next run is made", async () => {
  const home = makeTempDir();
  const bad = await runAtomic(["run", FLOW, "--input", "total=3", "--input", "every=1", "--input", "mode=bad"], { home });
  expect(bad.code).toBe(2); // the workflow's misuse of the SDK: a usage error (src/cli/drive.ts)
  expect(bad.stderr).toContain('ctx.continueAsNew: input "total" is invalid');
  expect(bad.stderr).toContain("hint: pass the inputs the workflow declares");
  const child = await runAtomic(["run", FLOW, "--input", "total=3", "--input", "every=1", "--input", "mode=child"], { home });
  expect(child.code).toBe(2);
  expect(child.stderr).toContain("ctx.continueAsNew ends a root run's history");
  const runs = await chainRuns(home);
  expect(runs.map((x) => x.status)).toEqual(["failed", "failed"]);
});

e2eTest("the next run of a chain runs the workflow file as it is at the hand-over; the run before it keeps the code it started with", async () => {
  const home = makeTempDir();
  const project = makeTempDir("atomic-continues-");
  cpSync(fixture("continues-code"), project, { recursive: true });
  const wf = join(project, "flow.ts");
  const proc = spawnAtomic(["--json", "run", wf], { home, cwd: project });
  const out = lineWatcher(proc.stdout);
  const id = JSON.parse(await out.waitFor(/"type":"run_started"/)).runId as string;
  await out.waitFor(/"kind":"ask"/);
  proc.kill("SIGTERM");
  await proc.exited;
  writeFileSync(wf, readFileSync(wf, "utf8").replace('const VERSION = "v1";', 'const VERSION = "v2";'));
  const promptId = JSON.parse((await runAtomic(["--json", "inbox", id], { home })).stdout).prompts[0].id as string;
  expect((await runAtomic(["answer", id, promptId, "yes"], { home })).code).toBe(0);
  const r = await runAtomic(["--json", "resume", id], { home, cwd: project });
  expect(r.code).toBe(0);
  expect(lastLine(r.stdout).outputs).toEqual({ first: "v1", second: "v2" });
  const runs = (await runAtomic(["--json", "runs"], { home })).stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; workflowDigest: string });
  expect(runs.length).toBe(2);
  expect(runs[0]!.workflowDigest).not.toBe(runs[1]!.workflowDigest);
});
