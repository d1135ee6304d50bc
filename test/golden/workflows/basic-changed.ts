/**
 * basic.ts with one change: the second branch of the fan-out asks for a
 * tool named "rate" where the recorded journal has "score". Replaying
 * ../basic.journal.json against this file must raise the nondeterminism
 * error at position 2.1.0.
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
      () => ctx.tool("rate", { words: fetched.words }, effect(fetched.words * 3)),
      () => ctx.tool("tags", { title: fetched.title }, effect(fetched.title.split(" "))),
    ])) as [{ text: string }, number, string[]];
    const summary = await ctx.tool("summarize", { score, tags }, effect(`${tags.join("-")}:${score}`));
    return { echoed: echo.text.trim(), score, tags, summary };
  },
});
