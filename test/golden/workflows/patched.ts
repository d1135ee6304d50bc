/**
 * Golden workflow "patched": patched-before.ts with its first step changed
 * behind ctx.patched("v2"). Recorded in ../patched.journal.json (the new
 * branch, with its marker); golden.test.ts replays that history, and
 * patched-before's (the old branch, no marker), against this file.
 */

import { workflow, v } from "atomic";
import { effect } from "./effect.ts";

export default workflow({
  name: "golden-patched",
  inputs: { topic: v.optional(v.string(), "durability") },
  async run(ctx) {
    const { topic } = ctx.inputs;
    const v2 = ctx.patched("v2");
    const fetched = v2 ? await ctx.tool("fetch-v2", { topic, depth: 2 }, effect(`deep notes on ${topic}`)) : await ctx.tool("fetch", { topic }, effect(`notes on ${topic}`));
    const summary = await ctx.tool("summarize", { fetched }, effect(fetched.toUpperCase()));
    return { path: v2 ? "new" : "old", summary };
  },
});
