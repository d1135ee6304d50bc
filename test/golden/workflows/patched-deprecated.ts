/**
 * patched.ts once no run of the old branch remains: the branch gone,
 * ctx.patched("v2") replaced by ctx.deprecatePatch("v2"). golden.test.ts
 * replays the "patched" history (with the marker) against it.
 */

import { workflow, v } from "atomic";
import { effect } from "./effect.ts";

export default workflow({
  name: "golden-patched",
  inputs: { topic: v.optional(v.string(), "durability") },
  async run(ctx) {
    const { topic } = ctx.inputs;
    ctx.deprecatePatch("v2");
    const fetched = await ctx.tool("fetch-v2", { topic, depth: 2 }, effect(`deep notes on ${topic}`));
    const summary = await ctx.tool("summarize", { fetched }, effect(fetched.toUpperCase()));
    return { path: "new", summary };
  },
});
