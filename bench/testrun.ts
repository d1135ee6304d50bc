/**
 * The test kit's speed: `testRun` (src/testing/test-run.ts) of a 1,000-step
 * workflow (bench/workflows/steps.ts, steps=1000: `ctx.tool` steps in
 * sequence) in this process, on the in-memory journal, against the same
 * workflow through `dist/atomic run` on SQLite (a fresh home, the default
 * durability), spawn to exit; alternating, medians of 5 each.
 * Target: testRun at least 5x faster (the ratio run ÷ testRun ≥ 5).
 */

import { join } from "node:path";
import { testRun } from "../src/testing/test-run.ts";
import { WORKFLOWS, atomicBin, binaryEnv, loadBenchWorkflow, median, removeTempDir, runTimed, settle, spread, tempDir, timed, type Bench, type Result } from "./lib.ts";

const REPS = 5;
const STEPS = 1000;
const TARGET = 5;

const bench: Bench = {
  name: "testrun",
  title: `testRun of ${STEPS} steps vs dist/atomic run of the same workflow on SQLite`,
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    const wf = (await loadBenchWorkflow("steps.ts")).definition;
    const viaTestRun = async () => {
      const r = await testRun(wf, { inputs: { steps: STEPS } });
      if (r.status !== "completed" || r.steps.length !== STEPS) throw new Error(`testRun ended ${r.status} after ${r.steps.length} steps`);
    };
    const viaRun = async () => {
      const home = tempDir("atomic-bench-testrun-");
      try {
        const r = await runTimed([bin, "run", join(WORKFLOWS, "steps.ts"), "--input", `steps=${STEPS}`, "--quiet"], { env: binaryEnv(home) });
        if (r.code !== 0) throw new Error(`atomic run exited ${r.code}`);
        return r.ms;
      } finally {
        removeTempDir(home);
      }
    };
    // Warm-up: the first of each loads its code.
    await viaTestRun();
    await viaRun();
    const kit: number[] = [];
    const run: number[] = [];
    for (let i = 0; i < REPS; i++) {
      settle();
      run.push(await viaRun());
      settle();
      kit.push(await timed(viaTestRun));
    }
    const ratio = median(run) / median(kit);
    return [
      {
        bench: "testrun",
        label: `testRun of ${STEPS} ctx.tool steps (in-memory journal)`,
        value: median(kit),
        unit: "ms",
        baseline: { label: `dist/atomic run of the same ${STEPS} steps on SQLite, spawn to exit`, value: median(run), unit: "ms" },
        ratio: { value: ratio, meaning: "atomic run ÷ testRun" },
        target: { text: `ratio >= ${TARGET}`, ok: ratio >= TARGET },
        notes: [`testRun: ${spread(kit)}`, `atomic run: ${spread(run)}`],
      },
    ];
  },
};

export default bench;
