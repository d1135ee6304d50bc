/**
 * Benchmark workflow: `n` openai agent stages (against the benchmarks' fake
 * provider, bench/fake-openai-server.ts), stage i prompted `${prompt}${i}`
 * ("latency:" for a paced model, "bash:..." for a tool call), either all at
 * once under one `ctx.parallel` (the pool's workers are the only limit) or
 * one after another, each turn of an agent loop. With `gate: true` a last
 * `ctx.tool` step follows that fails while ATOMIC_BENCH_GATE=closed (as in
 * steps.ts), so the run ends "failed" with every stage checkpointed and a
 * resume replays them all.
 *
 *   atomic run bench/workflows/agents.ts --input n=200 --input prompt=latency: --workers 4
 */

import { workflow, v } from "atomic";
import { closableGate } from "./gate.ts";

export default workflow({
  name: "bench-agents",
  description: "N agent stages against the fake provider, in parallel or in sequence (optionally followed by a closable gate)",
  inputs: {
    n: v.number(),
    prompt: v.string(),
    /** With a "bash:" prompt: the same prompt for every stage (no index appended). */
    same: v.optional(v.boolean(), false),
    mode: v.optional(v.picklist(["parallel", "sequential"]), "parallel"),
    gate: v.optional(v.boolean(), false),
  },
  async run(ctx) {
    const { n, prompt, same, mode, gate } = ctx.inputs;
    const stage = (i: number) => ctx.task(`agent-${i}`, { prompt: same ? prompt : `${prompt}${i}`, runner: "openai", model: "fake-model" });
    let chars = 0;
    if (mode === "parallel") {
      const results = (await ctx.parallel(Array.from({ length: n }, (_, i) => () => stage(i)))) as { text: string }[];
      for (const r of results) chars += r.text.length;
    } else {
      for (let i = 0; i < n; i++) chars += (await stage(i)).text.length;
    }
    if (gate) await closableGate(ctx);
    return { n, chars };
  },
});
