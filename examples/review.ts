/**
 * An example workflow: inspects a directory with a few shell stages run in
 * parallel, counts files with a memoized tool step, waits briefly on a
 * durable timer, and summarizes in a child workflow. Values reach the
 * shell stages quoted (`sh`) or as argv, never as shell code.
 *
 *   atomic run examples/review.ts --input dir=. --input depth=2
 */

import { workflow, sh, v } from "atomic";

const summarize = workflow({
  name: "summarize",
  inputs: { files: v.number(), lines: v.string() },
  async run(ctx) {
    const report = await ctx.shell("report", ["echo", `files=${ctx.inputs.files} lines=${ctx.inputs.lines.trim()}`]);
    return { summary: report.text.trim() };
  },
});

export default workflow({
  name: "review",
  description: "Look at a directory: list, count and summarize it",
  inputs: {
    dir: v.optional(v.string(), "."),
    depth: v.optional(v.number(), 2),
  },
  async run(ctx) {
    const { dir, depth } = ctx.inputs;
    const [listing, lines] = (await ctx.parallel([
      { name: "list", shell: sh`find ${dir} -maxdepth ${depth} -type f -not -path '*/node_modules/*' -not -path '*/.git/*' | sort | head -50` },
      { name: "count-lines", shell: sh`find ${dir} -maxdepth ${depth} -name '*.ts' -not -path '*/node_modules/*' -exec cat {} + 2>/dev/null | wc -l` },
      { name: "disk", shell: sh`du -sh ${dir} 2>/dev/null | cut -f1` },
    ])) as { text: string }[];
    const files = await ctx.tool("count-files", { dir }, async () => listing!.text.split("\n").filter(Boolean).length);
    await ctx.sleep(200);
    const { summary } = await ctx.workflow(summarize, { files, lines: lines!.text });
    return { files, summary };
  },
});
