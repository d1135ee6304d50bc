/**
 * Golden workflow "child": a tool step, a child workflow (two tool steps
 * around a shell stage), and a tool step using the child's outputs.
 * Recorded twice: complete (../child.journal.json) and killed after the
 * child's last checkpoint, before the child recorded its end
 * (../child-in-flight.journal.json), so replay re-enters the child run.
 */

import { workflow, v } from "atomic";
import { effect } from "./effect.ts";

const worker = workflow({
  name: "golden-worker",
  inputs: { task: v.string() },
  async run(ctx) {
    const { task } = ctx.inputs;
    const length = await ctx.tool("prepare", { task }, effect(task.length));
    const build = await ctx.shell("build", `printf '%s' ${JSON.stringify(task)} | wc -c`);
    const ok = await ctx.tool("check", { length, out: build.text.trim() }, effect(length === Number(build.text.trim())));
    return { length, ok };
  },
});

export default workflow({
  name: "golden-child",
  inputs: { goal: v.optional(v.string(), "ship") },
  async run(ctx) {
    const plan = await ctx.tool("plan", { goal: ctx.inputs.goal }, effect(["alpha", "beta"]));
    const first = await ctx.workflow(worker, { task: plan[0]! }, { name: "worker-alpha" });
    const published = await ctx.tool("publish", { first }, effect(`published ${first.length} ok=${first.ok}`));
    return { plan, first, published };
  },
});
