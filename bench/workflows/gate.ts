/**
 * The closable gate of the benchmark workflows (steps.ts, agents.ts,
 * continues.ts): a last step, "gate", that fails while the environment says
 * ATOMIC_BENCH_GATE=closed (no retries), so the run ends "failed" with all
 * its checkpoints recorded and stays resumable: a resume replays every
 * recorded step and meets the gate again. The gate reads the environment
 * when it runs, so the workflow code takes the same path on every resume.
 */

import type { WorkflowContext } from "atomic";

export async function closableGate(ctx: Pick<WorkflowContext, "tool">): Promise<void> {
  await ctx.tool(
    "gate",
    null,
    () => {
      if (process.env.ATOMIC_BENCH_GATE === "closed") throw new Error("the gate is closed (ATOMIC_BENCH_GATE=closed)");
      return true;
    },
    { retries: 0 },
  );
}
