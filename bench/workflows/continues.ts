/**
 * Benchmark workflow: a long-lived loop in bounded runs (the
 * `continue-as-new` benchmark). `total` no-op `ctx.tool` steps in all,
 * `every` per run; each run continues as a new one (ctx.continueAsNew)
 * with its progress (`done`, `sum`) until the loop is over.
 *
 * With `gate: true` a last step, "gate", follows the loop in the last run.
 * It fails while the environment says ATOMIC_BENCH_GATE=closed (no
 * retries), so the chain's last run ends "failed" with its steps recorded
 * and stays resumable: `atomic resume` of the chain's first run then
 * follows the chain to its last run, replays that run's steps and meets
 * the gate again (as bench/workflows/steps.ts does for one run).
 *
 *   atomic run bench/workflows/continues.ts --input total=200000 --input every=10000
 */

import { workflow, v } from "atomic";
import { closableGate } from "./gate.ts";

export default workflow({
  name: "bench-continues",
  description: "a loop of no-op durable steps that continues as a new run every `every` steps",
  inputs: {
    total: v.number(),
    every: v.number(),
    done: v.optional(v.number(), 0),
    sum: v.optional(v.number(), 0),
    gate: v.optional(v.boolean(), false),
  },
  async run(ctx) {
    const { total, every, gate } = ctx.inputs;
    let { done, sum } = ctx.inputs;
    const end = Math.min(total, done + every);
    for (; done < end; done++) {
      const i = done;
      sum += await ctx.tool("step", i, () => (i * i) % 7);
    }
    if (done < total) ctx.continueAsNew({ total, every, done, sum, gate });
    if (gate) await closableGate(ctx);
    return { done, sum };
  },
});
