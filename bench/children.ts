/**
 * Child runs: 300 child workflows of 3 no-op `ctx.tool` steps each under
 * one parent's `ctx.parallel`, in process, synchronous=FULL. Reported as
 * child runs per second over the fan-out's makespan (measured inside the
 * parent). The best peer managed 366 workflows/s: that is the reference.
 *
 * Baseline, in the same run: the same 900 no-op steps under one
 * `ctx.parallel` without child boundaries; the ratio shows what the child
 * runs themselves (their runs rows, boundary steps, start/end records) add.
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

const CHILDREN = 300;
const STEPS_EACH = 3;
const REPS = 5;
const PEER = 366;

const bench: Bench = {
  name: "children",
  title: `${CHILDREN} child workflows of ${STEPS_EACH} no-op steps under one ctx.parallel`,
  async run(): Promise<Result[]> {
    const home = tempDir();
    try {
      const parent = await loadBenchWorkflow("children.ts");
      const flat = await loadBenchWorkflow("fanout.ts");
      const { journal, tx } = await openCountedJournal(home, "full");
      try {
        expectStatus(await runInProcess(journal, home, parent, { children: 20, steps: STEPS_EACH }), "completed");
        expectStatus(await runInProcess(journal, home, flat, { steps: 60, mode: "parallel" }), "completed");
        let appends = 0;
        let entries = 0;
        const wall: number[] = [];
        const samples = await alternate(REPS, {
          flat: async () => {
            const run = await runInProcess(journal, home, flat, { steps: CHILDREN * STEPS_EACH, mode: "parallel" });
            expectStatus(run, "completed");
            return (run.outcome.outputs as { makespanMs: number }).makespanMs;
          },
          children: async () => {
            tx.reset();
            const run = await runInProcess(journal, home, parent, { children: CHILDREN, steps: STEPS_EACH });
            expectStatus(run, "completed");
            appends = tx.append;
            entries = tx.entries;
            wall.push(run.ms);
            return (run.outcome.outputs as { makespanMs: number }).makespanMs;
          },
        });
        const ms = median(samples.children);
        const rate = CHILDREN / (ms / 1000);
        const flatMs = median(samples.flat);
        return [
          {
            bench: "children",
            label: `child runs/s, ${CHILDREN} children x ${STEPS_EACH} no-op steps under one ctx.parallel (synchronous=FULL)`,
            value: rate,
            unit: "child runs/s",
            baseline: { label: `the same ${CHILDREN * STEPS_EACH} steps under one ctx.parallel, no children`, value: flatMs, unit: "ms" },
            ratio: { value: ms / flatMs, meaning: "children makespan ÷ flat makespan (cost of the child boundaries)" },
            target: { text: `>= ${PEER} child runs/s (the best peer's figure; a reference, not a same-run baseline)`, ok: rate >= PEER },
            notes: [
              `children fan-out makespan: ${spread(samples.children)}; whole parent run ${spread(wall)}`,
              `flat fan-out makespan: ${spread(samples.flat)}`,
              `journal append transactions per parent run: ${appends} for ${entries} entries ` +
                `(${fmt(entries / Math.max(1, appends), 0)} entries per commit)`,
              `vs the peer's ${PEER} workflows/s: ${fmt(rate / PEER, 1)}x`,
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
