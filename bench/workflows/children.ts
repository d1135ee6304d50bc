/**
 * Benchmark workflow: `children` child workflows of `steps` no-op durable
 * steps each, all under one `ctx.parallel` of the parent (no concurrency
 * limit). Returns the makespan of the fan-out alone (measured inside the
 * parent workflow).
 */

import { workflow, v } from "atomic";

const noop = () => undefined;

const child = workflow({
  name: "bench-child",
  inputs: { index: v.number(), steps: v.number() },
  async run(ctx) {
    for (let i = 0; i < ctx.inputs.steps; i++) await ctx.tool("noop", i, noop);
    return { index: ctx.inputs.index };
  },
});

export default workflow({
  name: "bench-children",
  description: "N child workflows of a few no-op steps each, in parallel",
  inputs: {
    children: v.number(),
    steps: v.optional(v.number(), 3),
  },
  async run(ctx) {
    const { children, steps } = ctx.inputs;
    const t0 = performance.now();
    await ctx.parallel(
      Array.from({ length: children }, (_, index) => () => ctx.workflow(child, { index, steps }, { name: `child-${index}` })),
    );
    return { children, steps, makespanMs: performance.now() - t0 };
  },
});
