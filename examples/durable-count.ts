/**
 * Durability, visibly: 40 steps, each a memoized side effect that appends a
 * line to a file and takes a little while. Kill the run at any moment
 * (kill -9 included) and `atomic resume` it: finished steps are not redone.
 *
 *   atomic run examples/durable-count.ts --input out=/tmp/effects.txt
 */

import { workflow, sh, v } from "atomic";
import { appendFileSync } from "node:fs";

export default workflow({
  name: "durable-count",
  description: "Count to N with one durable side effect per step",
  inputs: {
    out: v.string(),
    steps: v.optional(v.number(), 40),
    delayMs: v.optional(v.number(), 50),
  },
  async run(ctx) {
    let total = 0;
    for (let i = 1; i <= ctx.inputs.steps; i++) {
      total += await ctx.tool(`add-${i}`, { i }, async ({ idempotencyKey }) => {
        await Bun.sleep(ctx.inputs.delayMs);
        appendFileSync(ctx.inputs.out, `${idempotencyKey}\n`);
        return i;
      });
    }
    const check = await ctx.shell("check", sh`wc -l < ${ctx.inputs.out}`);
    return { total, effectLines: Number(check.text.trim()) };
  },
});
