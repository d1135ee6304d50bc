/**
 * Benchmark workflow of stage sandboxes (bench/sandbox.ts): `n` shell
 * stages running `command` one after another, each sandboxed (bubblewrap,
 * network "none") when `sandbox` is true, unsandboxed otherwise.
 *
 *   atomic run bench/workflows/sandboxed-shell.ts --input n=10 --input sandbox=true
 */

import { workflow, v } from "atomic";

export default workflow({
  name: "bench-sandboxed-shell",
  description: "N shell stages in sequence, sandboxed or not",
  inputs: {
    n: v.optional(v.number(), 1),
    command: v.optional(v.string(), "true"),
    sandbox: v.optional(v.boolean(), false),
  },
  async run(ctx) {
    const { n, command, sandbox } = ctx.inputs;
    for (let i = 0; i < n; i++) await ctx.shell(`s${i}`, command, { sandbox: sandbox ? { network: "none" } : "off" });
    return { n, sandbox };
  },
});
