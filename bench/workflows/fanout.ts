/**
 * Benchmark workflow: `steps` no-op durable steps (`ctx.tool`), either all
 * at once under one `ctx.parallel` (no concurrency limit) or one after
 * another. Returns the makespan of the steps alone (measured inside the
 * workflow, so the run's start and end records are left out).
 */

import { workflow, v } from "atomic";

const noop = () => undefined;

export default workflow({
  name: "bench-fanout",
  description: "N no-op durable steps, in parallel or in sequence",
  inputs: {
    steps: v.number(),
    mode: v.picklist(["parallel", "sequential"]),
  },
  async run(ctx) {
    const { steps, mode } = ctx.inputs;
    const t0 = performance.now();
    if (mode === "parallel") {
      await ctx.parallel(Array.from({ length: steps }, (_, i) => () => ctx.tool("noop", i, noop)));
    } else {
      for (let i = 0; i < steps; i++) await ctx.tool("noop", i, noop);
    }
    return { steps, mode, makespanMs: performance.now() - t0 };
  },
});
