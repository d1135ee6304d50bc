/**
 * loop-until-done: work on a task in iterations until an evaluator says it
 * is done. Each iteration runs a work stage (given the progress ledger and
 * the previous iteration's output) and an evaluate stage answering
 * {done, summary, failures[], remaining_work}. Done: a completion stage
 * writes the summary. Not done after max_iterations: the run ends failed,
 * with the remaining work.
 *
 *   atomic run loop-until-done --input prompt="Make the test suite pass" --input max_iterations=3
 *
 * Artifacts, under <cwd>/.atomic/runs/loop-until-done-<run id>/:
 * work-NN.md (each iteration's work), progress-ledger.json (every
 * iteration's evaluation and an advisory progress trend), and
 * completion-summary.md when done.
 *
 * Durability: the artifact directory is fixed by a recorded step and each
 * file is written by one, so a resumed run continues the same ledger.
 */
import { workflow, v } from "atomic";

const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));

const Evaluation = v.object({
  done: v.boolean(),
  summary: v.string(),
  failures: v.array(v.string()),
  remaining_work: v.string(),
});

interface Entry {
  iteration: number;
  work: string;
  done: boolean;
  summary: string;
  failures: string[];
  remaining_work: string;
  /** Advisory: fewer failures than the iteration before is "improving". */
  trend: "first" | "improving" | "flat" | "worse";
}

export default workflow({
  name: "loop-until-done",
  description: "Work on a task in iterations until an evaluator says it is done",
  inputs: {
    prompt: v.pipe(v.string(), v.minLength(1), v.description("the task")),
    max_iterations: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(20), v.description("most work/evaluate iterations")), 5),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    evaluator_runner: optionalText("runner of the evaluate stages (default: runner)"),
    evaluator_model: optionalText("model of the evaluate stages (default: model)"),
  },
  outputs: v.object({
    done: v.boolean(),
    iterations: v.number(),
    summary: v.pipe(v.string(), v.description("the completion summary, or the last evaluation's summary")),
    remaining_work: v.string(),
    ledger: v.pipe(v.string(), v.description("progress-ledger.json")),
    dir: v.pipe(v.string(), v.description("the artifact directory")),
  }),
  stages: [
    { name: "work-NN", description: "iteration NN works on the prompt" },
    { name: "evaluate-NN", description: "judges whether it is done, with the remaining work" },
    { name: "complete", description: "writes the completion summary once done" },
  ],
  async run(ctx) {
    const { prompt, max_iterations } = ctx.inputs;
    const worker = { runner: ctx.inputs.runner, model: ctx.inputs.model };
    const evaluator = { runner: ctx.inputs.evaluator_runner ?? worker.runner, model: ctx.inputs.evaluator_model ?? worker.model };
    const dir = await ctx.tool("artifact-dir", {}, () => `${process.cwd()}/.atomic/runs/loop-until-done-${ctx.runId}`);
    const ledgerPath = `${dir}/progress-ledger.json`;
    const ledger: Entry[] = [];
    let previous = "";
    for (let i = 1; i <= max_iterations; i++) {
      const nn = String(i).padStart(2, "0");
      const work = await ctx.task(`work-${nn}`, {
        ...worker,
        prompt:
          `You are the worker, iteration ${i} of at most ${max_iterations}. Make progress on the task; an evaluator judges your work after this turn.\n\n` +
          `Task:\n${prompt}\n\nProgress ledger so far:\n${JSON.stringify(ledger, null, 2)}` +
          (previous ? `\n\nYour previous iteration's output:\n${previous}` : ""),
      });
      previous = work.text;
      const evaluation = await ctx.task(`evaluate-${nn}`, {
        ...evaluator,
        tools: ["read", "list", "grep"],
        schema: Evaluation,
        failureMode: "return",
        prompt:
          `You are the evaluator. Decide whether the task is done, from the worker's output and the files in this directory.\n\n` +
          `Task:\n${prompt}\n\nThe worker's output (iteration ${i}):\n${work.text}`,
      });
      const parsed = evaluation.status === "completed" ? v.safeParse(Evaluation, evaluation.structured) : undefined;
      const e = parsed?.success
        ? parsed.output
        : { done: false, summary: "the evaluation gave no usable answer", failures: [evaluation.error?.message ?? "invalid evaluation"], remaining_work: "evaluate again" };
      const before = ledger.at(-1);
      const trend: Entry["trend"] = !before ? "first" : e.failures.length < before.failures.length ? "improving" : e.failures.length === before.failures.length ? "flat" : "worse";
      ledger.push({ iteration: i, work: `work-${nn}.md`, ...e, trend });
      await ctx.tool(`write-iteration-${nn}`, { iteration: i }, async () => {
        await Bun.write(`${dir}/work-${nn}.md`, work.text);
        await Bun.write(ledgerPath, JSON.stringify({ task: prompt, iterations: ledger }, null, 2) + "\n");
        return ledgerPath;
      });
      if (e.done) {
        const completion = await ctx.task("complete", {
          ...worker,
          tools: [],
          prompt: `The task is done. Write a short completion summary for the person who asked.\n\nTask:\n${prompt}\n\nProgress ledger:\n${JSON.stringify(ledger, null, 2)}`,
        });
        await ctx.tool("write-summary", {}, () => Bun.write(`${dir}/completion-summary.md`, completion.text));
        return { done: true, iterations: i, summary: completion.text, remaining_work: "", ledger: ledgerPath, dir };
      }
    }
    const last = ledger.at(-1)!;
    return ctx.exit({
      status: "failed",
      reason: `not done after ${max_iterations} iterations; remaining: ${last.remaining_work}`,
      outputs: { done: false, iterations: ledger.length, summary: last.summary, remaining_work: last.remaining_work, ledger: ledgerPath, dir },
    });
  },
});
