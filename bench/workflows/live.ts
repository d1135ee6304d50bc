/** Benchmark workflow: `n` openai agent stages streaming at once (bench/attach-latency.ts). */
import { workflow, v } from "atomic";

export default workflow({
  name: "bench-live",
  inputs: { n: v.number() },
  async run(ctx) {
    const results = (await ctx.parallel(Array.from({ length: ctx.inputs.n }, (_, i) => () => ctx.task(`s${i}`, { prompt: `stream ${i}`, runner: "openai", model: "fake-model" })))) as { text: string }[];
    return { chars: results.reduce((n, r) => n + r.text.length, 0) };
  },
});
