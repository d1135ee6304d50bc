/** Benchmark workflow: `stages` openai agent stages at once (one model call each), against one provider and model. */
import { workflow, v } from "atomic";

export default workflow({
  name: "bench-rate-limited",
  inputs: { stages: v.pipe(v.string(), v.transform(Number)) },
  async run(ctx) {
    const results = await Promise.all(
      Array.from({ length: ctx.inputs.stages }, (_, i) => ctx.task(`s${i}`, { prompt: `stage ${i}`, runner: "openai", model: "fake-model", failureMode: "return" })),
    );
    return { completed: results.filter((r) => r.status === "completed").length, failed: results.filter((r) => r.status !== "completed").map((r) => r.error?.code ?? r.status) };
  },
});
