/**
 * Fan-out: 200 no-op `ctx.tool` steps under one `ctx.parallel` (no
 * concurrency limit) against the same 200 steps one after another, in
 * process, synchronous=FULL, alternating. The makespan is measured inside
 * the workflow around the steps (the run's own start and end records are
 * the same for both and left out).
 *
 * Target: parallel makespan at most 0.3x the sequential one. That needs
 * concurrent steps to share commits (group commit): the journal's append
 * transactions per run are counted and shown.
 */

import {
  alternate,
  expectStatus,
  fmt,
  loadBenchWorkflow,
  median,
  openCountedJournal,
  removeTempDir,
  runInProcess,
  spread,
  tempDir,
  type Bench,
  type Result,
} from "./lib.ts";

const STEPS = 200;
const REPS = 7;
const TARGET = 0.3;

const bench: Bench = {
  name: "fanout",
  title: `${STEPS} no-op durable steps under one ctx.parallel vs the same steps in sequence`,
  async run(): Promise<Result[]> {
    const home = tempDir();
    try {
      const wf = await loadBenchWorkflow("fanout.ts");
      const { journal, tx } = await openCountedJournal(home, "full");
      try {
        for (const mode of ["parallel", "sequential"]) {
          expectStatus(await runInProcess(journal, home, wf, { steps: STEPS, mode }), "completed");
        }
        const appends = { parallel: 0, sequential: 0 };
        const one = (mode: "parallel" | "sequential") => async () => {
          tx.reset();
          const run = await runInProcess(journal, home, wf, { steps: STEPS, mode });
          expectStatus(run, "completed");
          appends[mode] = tx.append;
          return (run.outcome.outputs as { makespanMs: number }).makespanMs;
        };
        const samples = await alternate(REPS, { sequential: one("sequential"), parallel: one("parallel") });
        const par = median(samples.parallel);
        const seq = median(samples.sequential);
        const ratio = par / seq;
        return [
          {
            bench: "fanout",
            label: `fan-out makespan, ${STEPS} parallel no-op steps (synchronous=FULL)`,
            value: par,
            unit: "ms",
            baseline: { label: `the same ${STEPS} steps in sequence`, value: seq, unit: "ms" },
            ratio: { value: ratio, meaning: "parallel makespan ÷ sequential makespan" },
            target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET },
            notes: [
              `parallel: ${spread(samples.parallel)}; ${fmt(STEPS / (par / 1000), 0)} steps/s`,
              `sequential: ${spread(samples.sequential)}; ${fmt(STEPS / (seq / 1000), 0)} steps/s`,
              `journal append transactions per run: parallel ${appends.parallel}, sequential ${appends.sequential} ` +
                "(each includes run_started and status_changed)",
            ],
          },
        ];
      } finally {
        await journal.close();
      }
    } finally {
      removeTempDir(home);
    }
  },
};

export default bench;
