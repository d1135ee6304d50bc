/**
 * The foundation's crash guarantees with stages on the worker pool: the
 * root is SIGKILLed (by a fault point between a stage's end and its
 * checkpoint, right after a checkpoint, or by the test at a marker) while
 * stages run on workers; the pool dies with it; `atomic resume` completes
 * the run with the outputs of an uninterrupted one, and no stage whose
 * checkpoint was recorded ran again.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "stages.ts");
const EXPECTED = { seq: ["v0", "v1", "v2", "v3", "v4"], par: ["p0", "p1", "p2", "p3", "p4", "p5"] };

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

interface Step {
  name: string;
  kind: string;
  status: string;
  position: string;
}

function effects(file: string): Map<string, number> {
  const counts = new Map<string, number>();
  if (!existsSync(file)) return counts;
  for (const line of readFileSync(file, "utf8").split("\n")) if (line) counts.set(line, (counts.get(line) ?? 0) + 1);
  return counts;
}

async function crashAndResume(crash: { faults?: string; killAtStarted?: string }): Promise<void> {
  const home = makeTempDir();
  const out = join(makeTempDir(), "effects.txt");
  const env = crash.faults ? { ATOMIC_FAULT_POINTS: crash.faults } : {};
  const proc = spawnAtomic(["run", FIXTURE, "--input", `out=${out}`, "--json", "--workers", "3"], { home, env });
  const lines = lineWatcher(proc.stdout);
  const first = await lines.waitFor(/"type":"run_started"/);
  const runId = JSON.parse(first).runId as string;
  if (crash.killAtStarted) {
    await lines.waitFor(new RegExp(`"type":"step_started".*"name":"${crash.killAtStarted}"`));
    proc.kill("SIGKILL");
  }
  expect(await proc.exited).toBe(137);

  const before = JSON.parse((await runAtomic(["show", runId, "--json"], { home })).stdout) as { status: string; steps: Step[] };
  expect(before.status).toBe("crashed");
  const recorded = before.steps.filter((s) => s.kind === "stage" && s.status === "completed").map((s) => `${runId}:${s.position}`);
  const effectsBefore = effects(out);

  const resumed = await runAtomic(["resume", runId, "--json"], { home });
  expect(resumed.code).toBe(0);
  const result = JSON.parse(resumed.stdout.trim().split("\n").pop()!);
  expect(result.outputs).toEqual(EXPECTED);

  const after = effects(out);
  // a checkpointed stage never ran again
  for (const key of recorded) expect(after.get(key)).toBe(effectsBefore.get(key));
  // every stage ran; only one that was in flight at the kill ran twice
  const all = (JSON.parse((await runAtomic(["show", runId, "--json"], { home })).stdout) as { steps: Step[] }).steps.filter((s) => s.kind === "stage");
  expect(all.length).toBe(11);
  for (const s of all) {
    const key = `${runId}:${s.position}`;
    expect(after.get(key) ?? 0).toBeGreaterThanOrEqual(1);
    expect(after.get(key)).toBeLessThanOrEqual(recorded.includes(key) ? 1 : 2);
  }
}

const FAULTS = [
  "before-checkpoint:1",
  "after-checkpoint:2",
  "before-checkpoint:5",
  "after-checkpoint:5",
  "before-checkpoint:6",
  "before-checkpoint:8",
  "after-checkpoint:9",
  "before-checkpoint:11",
];
for (const faults of FAULTS) {
  e2eTest(`pool: root killed at ${faults}, resumed`, () => crashAndResume({ faults }), 90_000);
}
for (const stage of ["seq-3", "par-4"]) {
  e2eTest(`pool: root SIGKILLed as ${stage} starts, resumed`, () => crashAndResume({ killAtStarted: stage }), 90_000);
}

// A stage's retries are durable: the root SIGKILLed between two attempts does not hand the stage its retries again
// (src/engine/steps/stage-retries.ts). Only after it failed for good does `atomic resume` give it another round.
e2eTest("pool: a failing stage's retries count the attempts earlier drives recorded; a resume after it failed for good gives a new round", async () => {
  const home = makeTempDir();
  const dir = makeTempDir();
  const tries = join(dir, "tries.txt");
  const wf = join(dir, "retry-crash.ts");
  // Attempt 3 holds (until the root's death ends its pool); every other attempt fails at once.
  await Bun.write(wf, `import { workflow } from "atomic";
export default workflow({ name: "retry-crash", async run(ctx) {
  return (await ctx.shell("flaky", 'echo $ATOMIC_ATTEMPT >> ${tries}; if [ "$ATOMIC_ATTEMPT" = 3 ]; then exec sleep 600; fi; exit 1', { retries: 2 })).text;
} });
`);
  const proc = spawnAtomic(["run", wf, "--json", "--workers", "1"], { home });
  const lines = lineWatcher(proc.stdout);
  const runId = JSON.parse(await lines.waitFor(/"type":"run_started"/)).runId as string;
  const attempts = () => (existsSync(tries) ? readFileSync(tries, "utf8").trim().split("\n") : []);
  // Attempt 3 holds: the two failures before it are recorded.
  await waitUntil(() => attempts().length === 3, 60_000, "attempt 3 to start");
  proc.kill("SIGKILL");
  expect(await proc.exited).toBe(137);
  expect(attempts()).toEqual(["1", "2", "3"]);

  // Two failures recorded, one attempt lost to the crash: retries: 2 leaves one more attempt, not three.
  const resumed = await runAtomic(["resume", runId], { home });
  expect(resumed.code).toBe(1);
  expect(resumed.stderr).toContain(`stage "flaky" failed`);
  expect(attempts()).toEqual(["1", "2", "3", "4"]);

  // Failed for good: a person's resume is another round of 1 + 2 retries.
  const again = await runAtomic(["resume", runId], { home });
  expect(again.code).toBe(1);
  expect(attempts()).toEqual(["1", "2", "3", "4", "5", "6", "7"]);
}, 90_000);
