/**
 * Benchmark workflow: `steps` durable steps (`ctx.tool`) of `ms` milliseconds
 * each, one after another; used by the service benchmark (a driver is
 * SIGKILLed between two steps and the service resumes the run).
 */

import { workflow, v } from "atomic";

export default workflow({
  name: "bench-paced",
  inputs: { steps: v.number(), ms: v.optional(v.number(), 20) },
  async run(ctx) {
    const { steps, ms } = ctx.inputs;
    for (let i = 0; i < steps; i++) await ctx.tool("step", i, () => Bun.sleep(ms));
    return { steps };
  },
});
