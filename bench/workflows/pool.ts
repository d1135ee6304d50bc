/**
 * Benchmark workflow of the worker pool (bench/pool.ts): `n` shell stages
 * running `command`, either all at once under one `ctx.parallel` (no
 * concurrency limit: the pool's workers are the only limit) or one after
 * another. With `gate`, a last `ctx.tool` step (it runs in the root, so
 * every worker is idle meanwhile) writes `<gate>.waiting` and waits until
 * the file `gate` exists.
 *
 *   atomic run bench/workflows/pool.ts --input n=500 --workers 4
 */

import { existsSync, writeFileSync } from "node:fs";
import { workflow, v } from "atomic";

export default workflow({
  name: "bench-pool",
  description: "N shell stages on the worker pool, in parallel or in sequence (optionally followed by a gate)",
  inputs: {
    n: v.number(),
    command: v.optional(v.string(), "true"),
    mode: v.optional(v.picklist(["parallel", "sequential"]), "parallel"),
    gate: v.optional(v.string(), ""),
  },
  async run(ctx) {
    const { n, command, mode, gate } = ctx.inputs;
    if (mode === "parallel") {
      await ctx.parallel(Array.from({ length: n }, (_, i) => ({ name: `s${i}`, shell: command })));
    } else {
      for (let i = 0; i < n; i++) await ctx.shell(`s${i}`, command);
    }
    if (gate) {
      await ctx.tool("gate", gate, async () => {
        writeFileSync(`${gate}.waiting`, "");
        while (!existsSync(gate)) await new Promise((r) => setTimeout(r, 20));
        return true;
      });
    }
    return { n, mode };
  },
});
