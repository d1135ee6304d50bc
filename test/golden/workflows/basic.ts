/**
 * Golden workflow "basic": tool steps, a durable sleep, and a parallel
 * fan-out of a shell stage and two tool steps. Recorded in
 * ../basic.journal.json; replayed by golden.test.ts. Changing which steps
 * it asks for (names, arguments, order) breaks that test on purpose.
 */

import { workflow, v } from "atomic";
import { effect } from "./effect.ts";

export default workflow({
  name: "golden-basic",
  inputs: { topic: v.optional(v.string(), "durability") },
  async run(ctx) {
    const { topic } = ctx.inputs;
    const fetched = await ctx.tool("fetch", { topic }, effect({ title: `notes on ${topic}`, words: 120 }));
    await ctx.sleep(20, "cool-down");
    const [echo, score, tags] = (await ctx.parallel([
      { name: "echo", shell: `echo ${topic}` },
      () => ctx.tool("score", { words: fetched.words }, effect(fetched.words * 3)),
      () => ctx.tool("tags", { title: fetched.title }, effect(fetched.title.split(" "))),
    ])) as [{ text: string }, number, string[]];
    const summary = await ctx.tool("summarize", { score, tags }, effect(`${tags.join("-")}:${score}`));
    return { echoed: echo.text.trim(), score, tags, summary };
  },
});
