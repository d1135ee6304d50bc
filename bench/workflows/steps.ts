/**
 * Benchmark workflow: `steps` no-op durable steps (`ctx.tool`), one after
 * another; used by the sequential, resume and recovery benchmarks.
 *
 * With `gate: true` a last step, "gate", follows. It fails while the
 * environment says ATOMIC_BENCH_GATE=closed (no retries), so the run ends
 * "failed" with all `steps` checkpoints recorded and stays resumable: a
 * resume then replays every recorded step (each returns its checkpoint)
 * and meets the gate again. The gate reads the environment when it runs,
 * so the workflow code takes the same path on every resume.
 *
 *   atomic run bench/workflows/steps.ts --input steps=2000
 */

import { workflow, v } from "atomic";
import { closableGate } from "./gate.ts";

const noop = () => undefined;

export default workflow({
  name: "bench-steps",
  description: "N no-op durable steps in sequence (optionally followed by a closable gate)",
  inputs: {
    steps: v.number(),
    gate: v.optional(v.boolean(), false),
  },
  async run(ctx) {
    const { steps, gate } = ctx.inputs;
    for (let i = 0; i < steps; i++) await ctx.tool("noop", i, noop);
    if (gate) await closableGate(ctx);
    return { steps };
  },
});
