/**
 * Sequential durable steps: one workflow of 2,000 no-op `ctx.tool` steps,
 * driven in process through the engine (RootRun.start + run()), against
 * raw bun:sqlite single-row commits (BEGIN IMMEDIATE, INSERT, COMMIT) with
 * the same synchronous setting, in the same directory, alternating.
 *
 * Target (FULL, the default durability): at least 0.6 of raw, i.e. one
 * fsync per step and little else. NORMAL is reported for information.
 * The journal's write transactions are counted to show the commits per step.
 * The same run without its pinned code (engine/pinned-code.ts: the files
 * stored at the start) alternates with them, to show what pinning costs
 * (issue 26: at most 5 %), and the collection of the code at load is timed.
 */

import { join } from "node:path";
import type { Durability } from "../src/journal/journal.ts";
import { collectCode } from "../src/engine/pinned-code.ts";
import {
  RawCommits,
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
  timed,
  type Bench,
  type Result,
} from "./lib.ts";

const STEPS = 2_000;
/** Alternating samples per side (a FULL sample is about 0.3 s on an idle disk, several seconds on a busy one). */
const REPS = { full: 5, normal: 5 } as const;
const TARGET = 0.6;

async function measure(durability: Durability): Promise<Result> {
  const home = tempDir();
  try {
    const wf = await loadBenchWorkflow("steps.ts");
    const { journal, tx } = await openCountedJournal(home, durability);
    const raw = new RawCommits(join(home, "raw.db"), durability);
    let txPerRun = 0;
    const inAppend: number[] = [];
    try {
      // Warm-up (JIT, first pages of both files); not counted.
      raw.commitRows(200);
      expectStatus(await runInProcess(journal, home, wf, { steps: 200 }), "completed");

      const samples = await alternate(REPS[durability], {
        raw: () => raw.commitRows(STEPS),
        engine: async () => {
          tx.reset();
          const run = await runInProcess(journal, home, wf, { steps: STEPS });
          expectStatus(run, "completed");
          txPerRun = tx.total();
          inAppend.push(tx.appendMs);
          return run.ms;
        },
        unpinned: async () => {
          const run = await runInProcess(journal, home, wf, { steps: STEPS }, false);
          expectStatus(run, "completed");
          return run.ms;
        },
      });
      const collect = await timed(() => collectCode(wf.path));
      const pinCost = median(samples.engine) / median(samples.unpinned) - 1;
      const rawRate = STEPS / (median(samples.raw) / 1000);
      const engineRate = STEPS / (median(samples.engine) / 1000);
      const ratio = engineRate / rawRate;
      const full = durability === "full";
      return {
        bench: "sequential",
        label: `sequential durable steps/s, synchronous=${durability.toUpperCase()} (${fmt(STEPS, 0)} no-op ctx.tool steps)`,
        value: engineRate,
        unit: "steps/s",
        baseline: { label: `raw bun:sqlite single-row commits, synchronous=${durability.toUpperCase()}`, value: rawRate, unit: "commits/s" },
        ratio: { value: ratio, meaning: "engine steps/s ÷ raw commits/s" },
        ...(full ? { target: { text: `ratio >= ${TARGET}`, ok: ratio >= TARGET } } : {}),
        notes: [
          `engine: whole run incl. lease and run records, ${spread(samples.engine)}`,
          `raw: ${spread(samples.raw)} for ${fmt(STEPS, 0)} commits`,
          `time inside journal.append (transaction + fsync): median ${fmt(median(inAppend))} ms of the run's ` +
            `${fmt(median(samples.engine))} ms (${fmt((median(inAppend) / STEPS) * 1000, 1)} µs per step; raw commit ` +
            `${fmt((median(samples.raw) / STEPS) * 1000, 1)} µs)`,
          `journal write transactions per run: ${txPerRun} (${fmt(txPerRun / STEPS, 3)} per step; ` +
            "the 4 extra: lease acquire, run_started, status_changed, lease release)",
          `pinned code: the run ${fmt(median(samples.engine))} ms with it, ${fmt(median(samples.unpinned))} ms without ` +
            `(${pinCost >= 0 ? "+" : ""}${fmt(pinCost * 100, 1)} %; target at most +5 %); collecting it at load ${fmt(collect, 2)} ms`,
          ...(full ? [] : ["informational: the 0.6 target applies to FULL"]),
        ],
      };
    } finally {
      raw.close();
      await journal.close();
    }
  } finally {
    removeTempDir(home);
  }
}

const bench: Bench = {
  name: "sequential",
  title: `${fmt(STEPS, 0)} no-op durable steps in sequence vs raw single-row commits`,
  async run() {
    return [await measure("full"), await measure("normal")];
  },
};

export default bench;
