/** Benchmark workflow: one openai agent stage with the given prompt. */
import { workflow, v } from "atomic";

export default workflow({
  name: "bench-agent",
  inputs: { prompt: v.string() },
  async run(ctx) {
    const r = await ctx.task("agent", { prompt: ctx.inputs.prompt, runner: "openai", model: "fake-model" });
    return { chars: r.text.length, turns: r.usage?.turns ?? 0 };
  },
});
