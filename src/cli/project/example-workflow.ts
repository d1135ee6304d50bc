/**
 * An example agent workflow, written by `atomic init` to
 * .atomic/workflows/summarize.ts: a shell stage counts the file's lines,
 * an agent stage reads the file and answers in a fixed shape (a valibot
 * schema), and the workflow returns both.
 *
 *   atomic check .atomic/workflows/summarize.ts
 *   atomic run summarize --input file=README.md
 */

import { workflow, v } from "atomic";

const Summary = v.object({ title: v.string(), points: v.array(v.string()) });

export default workflow({
  name: "summarize",
  description: "An agent summarizes a file as a title and a few key points",
  inputs: { file: v.string(), points: v.optional(v.number(), 3) },
  async run(ctx) {
    const { file, points } = ctx.inputs;
    const count = await ctx.shell("count-lines", ["wc", "-l", file]);
    const answer = await ctx.task("summarize", {
      prompt: `Summarize the attached file as a title and at most ${points} key points.`,
      reads: [file],
      tools: [],
      schema: Summary,
    });
    const summary = v.parse(Summary, answer.structured);
    return { ...summary, lines: Number.parseInt(count.text, 10) };
  },
});
