/**
 * Golden workflow "patched-before": the code before a change that
 * patched.ts puts behind ctx.patched("v2"). Recorded in
 * ../patched-before.journal.json; golden.test.ts replays that history
 * against patched.ts (the old branch) and against itself.
 */

import { workflow, v } from "atomic";
import { effect } from "./effect.ts";

export default workflow({
  name: "golden-patched",
  inputs: { topic: v.optional(v.string(), "durability") },
  async run(ctx) {
    const { topic } = ctx.inputs;
    const fetched = await ctx.tool("fetch", { topic }, effect(`notes on ${topic}`));
    const summary = await ctx.tool("summarize", { fetched }, effect(fetched.toUpperCase()));
    return { path: "old", summary };
  },
});
