/**
 * fan-out-and-synthesize: a planner splits the task into partitions, one
 * branch stage per partition works on it (in parallel; a failed branch does
 * not stop the others), and a synthesis stage joins what the branches found.
 *
 *   atomic run fan-out-and-synthesize --input prompt="Review this repository for security problems"
 *
 * Artifacts, under <cwd>/.atomic/runs/fan-out-and-synthesize-<run id>/:
 * partition-plan.json, branch-NN-<slug>.md (one per partition),
 * manifest.json (every branch, its status and file), synthesis.md.
 *
 * Durability: the artifact directory is fixed by a recorded step, and every
 * file is written by a recorded step, so a resumed run writes to the same
 * place and re-runs no finished stage. Copy this file to
 * .atomic/workflows/ to make your own version (a local file of the same
 * name wins over the builtin).
 */
import { workflow, v } from "atomic";

const count = (min: number, max: number, fallback: number, what: string) =>
  v.optional(v.pipe(v.number(), v.integer(), v.minValue(min), v.maxValue(max), v.description(what)), fallback);
const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));

const Plan = v.object({
  partitions: v.pipe(
    v.array(v.object({ label: v.pipe(v.string(), v.minLength(1)), objective: v.pipe(v.string(), v.minLength(1)) })),
    v.minLength(1),
  ),
});
type Partition = v.InferOutput<typeof Plan>["partitions"][number];

export default workflow({
  name: "fan-out-and-synthesize",
  description: "Split a task into partitions, work them in parallel, synthesize one answer",
  inputs: {
    prompt: v.pipe(v.string(), v.minLength(1), v.description("the task")),
    max_branches: count(1, 12, 4, "most partitions the planner may make"),
    max_concurrency: count(1, 12, 4, "most branches running at once"),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    branch_runner: optionalText("runner of the branch stages (default: runner)"),
    branch_model: optionalText("model of the branch stages (default: model)"),
  },
  outputs: v.object({
    result: v.pipe(v.string(), v.description("the synthesis")),
    partitions: v.array(v.object({ label: v.string(), objective: v.string() })),
    branches: v.pipe(v.array(v.string()), v.description("the branch files")),
    synthesis: v.pipe(v.string(), v.description("synthesis.md")),
    dir: v.pipe(v.string(), v.description("the artifact directory")),
  }),
  stages: [
    { name: "plan", description: "partitions the prompt (partition-plan.json)" },
    { name: "branch-NN-<slug>", description: "one stage per partition, all at once" },
    { name: "synthesize", description: "merges the branches (synthesis.md)" },
  ],
  async run(ctx) {
    const { prompt, max_branches, max_concurrency } = ctx.inputs;
    const lead = { runner: ctx.inputs.runner, model: ctx.inputs.model };
    const worker = { runner: ctx.inputs.branch_runner ?? lead.runner, model: ctx.inputs.branch_model ?? lead.model };
    const dir = await ctx.tool("artifact-dir", {}, () => `${process.cwd()}/.atomic/runs/fan-out-and-synthesize-${ctx.runId}`);
    const write = (name: string, files: Record<string, string>) =>
      ctx.tool(name, Object.keys(files), async () => {
        for (const [file, text] of Object.entries(files)) await Bun.write(`${dir}/${file}`, text);
        return Object.keys(files).map((f) => `${dir}/${f}`);
      });

    const plan = await ctx.task("plan", {
      ...lead,
      tools: [],
      schema: Plan,
      failureMode: "return",
      prompt:
        `You are the planner. Split this task into at most ${max_branches} independent partitions that can be worked on in parallel. ` +
        `Give each a short label and an objective.\n\nTask:\n${prompt}`,
    });
    const planned = plan.status === "completed" ? v.safeParse(Plan, plan.structured) : undefined;
    // An unusable plan is not fatal: the whole task becomes one partition.
    const partitions: Partition[] = planned?.success ? planned.output.partitions.slice(0, max_branches) : [{ label: "task", objective: prompt }];
    await write("write-plan", {
      "partition-plan.json": JSON.stringify({ partitions, fallback: !planned?.success, planner_error: plan.error ?? null }, null, 2) + "\n",
    });

    const files = partitions.map((p, i) => `branch-${String(i + 1).padStart(2, "0")}-${slug(p.label)}.md`);
    const results = (await ctx.parallel(
      partitions.map((p, i) => ({
        name: files[i]!.replace(/\.md$/, ""),
        ...worker,
        failureMode: "return" as const,
        prompt: `You are one of ${partitions.length} workers on a larger task; work only on your part.\n\nTask:\n${prompt}\n\nYour part (${p.label}):\n${p.objective}`,
      })),
      { concurrency: max_concurrency, failFast: false },
    )) as { status: string; text: string; error?: { message: string } }[];
    const branchFiles: Record<string, string> = {};
    results.forEach((r, i) => {
      branchFiles[files[i]!] = r.status === "completed" ? r.text : `(this branch ${r.status}: ${r.error?.message ?? "no answer"})\n`;
    });
    const manifest = partitions.map((p, i) => ({ ...p, file: files[i], status: results[i]!.status, error: results[i]!.error?.message ?? null }));
    const branchPaths = await write("write-branches", { ...branchFiles, "manifest.json": JSON.stringify({ branches: manifest }, null, 2) + "\n" });

    const done = partitions.map((p, i) => ({ p, r: results[i]! })).filter((x) => x.r.status === "completed");
    if (done.length === 0) ctx.exit({ status: "failed", reason: "every branch failed; see manifest.json", outputs: { dir } });
    const synthesis = await ctx.task("synthesize", {
      ...lead,
      tools: [],
      prompt:
        `You are the synthesizer. Combine the workers' findings into one answer to the task.` +
        `${done.length < partitions.length ? ` ${partitions.length - done.length} of ${partitions.length} parts failed; say what is missing.` : ""}` +
        `\n\nTask:\n${prompt}\n\n` +
        done.map(({ p, r }) => `## ${p.label}\n${r.text}`).join("\n\n"),
    });
    const [synthesisPath] = await write("write-synthesis", { "synthesis.md": synthesis.text });
    return { result: synthesis.text, partitions, branches: branchPaths.slice(0, -1), synthesis: synthesisPath!, dir };
  },
});

/** A label as a file-name part: lower-case letters, digits and dashes, at most 40. */
function slug(label: string): string {
  return label.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 40) || "part";
}
