/**
 * Check: `dist/atomic check` of a 200-line workflow (the compiler inside the
 * binary, already unpacked, HOME an empty temp dir) against the project's
 * own `node_modules/.bin/tsc --noEmit` on the same file in the same
 * directory (the tsconfig and declarations `atomic init` wrote there),
 * alternating, each a fresh process (cold: no compiler state kept between
 * runs). `atomic check` also reads the Bun and Node types a workflow may
 * use and then loads the workflow; tsc does neither.
 * Target: median at most 1.5x tsc's median. The first `atomic check`
 * (which unpacks the compiler to the cache) is reported for information.
 */

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, atomicBin, median, runTimed, spread, tempDir, type Bench, type Result } from "./lib.ts";

const REPS = 9;
const TARGET = 1.5;

/** A workflow of exactly 200 lines: helpers, typed inputs and outputs, shell, agent and tool stages, a child. */
export function workflowOf200Lines(): string {
  const lines = [
    'import { workflow, sh, v, type StageResult } from "atomic";',
    "",
    "interface Finding { file: string; line: number; severity: \"low\" | \"high\"; text: string }",
    "",
    "const Review = v.object({ findings: v.array(v.object({ file: v.string(), line: v.number(), severity: v.picklist([\"low\", \"high\"]), text: v.string() })) });",
    "",
    "function countLines(result: StageResult): number {",
    "  return result.text.split(\"\\n\").filter(Boolean).length;",
    "}",
    "",
    "const summarize = workflow({",
    '  name: "summarize",',
    "  inputs: { findings: v.number(), high: v.number() },",
    "  async run(ctx) {",
    '    const report = await ctx.shell("report", ["echo", `findings=${ctx.inputs.findings} high=${ctx.inputs.high}`]);',
    "    return { summary: report.text.trim() };",
    "  },",
    "});",
    "",
  ];
  const helpers: string[] = [];
  for (let i = 0; helpers.length < 100; i++) {
    helpers.push(
      `function score${i}(findings: readonly Finding[]): number {`,
      `  const weights: Record<Finding["severity"], number> = { low: ${i + 1}, high: ${i + 10} };`,
      "  return findings.reduce((sum, f) => sum + weights[f.severity] * (f.line > 0 ? 1 : 0), 0);",
      "}",
      "",
    );
  }
  lines.push(...helpers.slice(0, 100));
  const body = [
    "export default workflow({",
    '  name: "review-200",',
    '  description: "A 200-line workflow for bench/check.ts",',
    "  inputs: { dir: v.string(), depth: v.optional(v.number(), 2), strict: v.optional(v.boolean(), false) },",
    "  async run(ctx) {",
    "    const { dir, depth, strict } = ctx.inputs;",
    "    const [listing, size] = (await ctx.parallel([",
    '      { name: "list", shell: sh`find ${dir} -maxdepth ${depth} -type f | sort` },',
    '      { name: "size", shell: ["du", "-sh", dir] },',
    "    ])) as StageResult[];",
    '    const files = await ctx.tool("count", { dir }, () => countLines(listing!));',
    "    const review = await ctx.task(\"review\", {",
    "      prompt: `Review the ${files} files under ${dir}. Strict: ${strict}.`,",
    "      tools: [\"read\", \"grep\"],",
    "      schema: Review,",
    "    });",
    "    const findings: Finding[] = v.parse(Review, review.structured).findings;",
  ];
  for (let i = 0; i < 20; i++) body.push(`    const s${i} = await ctx.tool("score-${i}", { n: findings.length }, () => score${i}(findings));`);
  body.push(
    "    const high = findings.filter((f) => f.severity === \"high\").length;",
    "    const { summary } = await ctx.workflow(summarize, { findings: findings.length, high });",
    `    const total = ${Array.from({ length: 20 }, (_, i) => `s${i}`).join(" + ")};`,
    "    await ctx.sleep(1_000);",
    "    return { files, size: size!.text.trim(), summary, total, high };",
    "  },",
    "});",
  );
  lines.push(...body);
  while (lines.length < 200) lines.splice(lines.length - body.length, 0, `// padding ${lines.length}`);
  if (lines.length !== 200) throw new Error(`the workflow has ${lines.length} lines, not 200`);
  return `${lines.join("\n")}\n`;
}

const bench: Bench = {
  name: "check",
  title: "atomic check vs tsc --noEmit on a 200-line workflow",
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    const dir = tempDir("atomic-bench-check-");
    const home = tempDir("atomic-bench-check-home-");
    const env: Record<string, string> = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, ATOMIC_HOME: join(home, ".atomic"), NO_COLOR: "1" };
    const init = await runTimed([bin, "init", dir], { env, capture: true });
    if (init.code !== 0) throw new Error(`atomic init failed: ${init.stderr}`);
    const file = join(dir, "review-200.ts");
    writeFileSync(file, workflowOf200Lines());
    const tsc = [join(ROOT, "node_modules", ".bin", "tsc"), "--noEmit", "-p", dir];
    const check = [bin, "check", file];
    const first = await runTimed(check, { env, capture: true });
    if (first.code !== 0) throw new Error(`atomic check failed on the workflow: ${first.stdout}${first.stderr}`);
    const base = await runTimed(tsc, { env, capture: true });
    if (base.code !== 0) throw new Error(`tsc failed on the workflow: ${base.stdout}${base.stderr}`);
    const ours: number[] = [];
    const theirs: number[] = [];
    for (let i = 0; i < REPS; i++) {
      theirs.push((await runTimed(tsc, { env })).ms);
      ours.push((await runTimed(check, { env })).ms);
    }
    const ratio = median(ours) / median(theirs);
    return [
      {
        bench: "check",
        label: "atomic check of a 200-line workflow",
        value: median(ours),
        unit: "ms",
        baseline: { label: "the project's tsc --noEmit on it", value: median(theirs), unit: "ms" },
        ratio: { value: ratio, meaning: "atomic check ÷ tsc --noEmit" },
        target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET },
        notes: [`atomic check: ${spread(ours)}`, `tsc --noEmit: ${spread(theirs)}`, `first atomic check (unpacks the compiler): ${Math.round(first.ms)} ms`],
      },
    ];
  },
};

export default bench;
