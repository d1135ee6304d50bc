/**
 * generate-and-filter: many candidate answers in parallel, a filter stage
 * that drops duplicates and weak ones and keeps a shortlist, and an
 * optional judge stage that orders the shortlist with a rationale.
 *
 *   atomic run generate-and-filter --input prompt="Name our CLI tool" --input num_candidates=6
 *
 * Artifacts, under <cwd>/.atomic/runs/generate-and-filter-<run id>/:
 * candidate-N.md (one per candidate that answered), filter.json (the
 * shortlist, what was discarded and why, paths the filter named that do not
 * exist), shortlist.md (the final order, each candidate in full).
 *
 * The filter's answer is checked: a path that is not a candidate's, or
 * one named twice, is dropped; an empty or unusable answer falls back to
 * the first candidates. A judge naming paths outside the shortlist is
 * ignored for those; shortlisted candidates it leaves out keep their place
 * after the ones it ordered.
 */
import { workflow, v } from "atomic";

const count = (min: number, max: number, fallback: number, what: string) =>
  v.optional(v.pipe(v.number(), v.integer(), v.minValue(min), v.maxValue(max), v.description(what)), fallback);
const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));

const Filtered = v.object({
  shortlist: v.array(v.string()),
  discarded: v.array(v.object({ path: v.string(), reason: v.string() })),
});
const Judged = v.object({ order: v.array(v.string()), rationale: v.string() });

export default workflow({
  name: "generate-and-filter",
  description: "Generate candidates in parallel, filter them to a shortlist, optionally have a judge order it",
  inputs: {
    prompt: v.pipe(v.string(), v.minLength(1), v.description("what to generate")),
    num_candidates: count(2, 20, 8, "candidates generated"),
    shortlist_size: count(1, 10, 3, "most candidates kept"),
    use_judge: v.optional(v.pipe(v.boolean(), v.description("order the shortlist with a judge stage")), true),
    max_concurrency: count(1, 12, 4, "most candidate stages at once"),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    judge_runner: optionalText("runner of the filter and judge stages (default: runner)"),
    judge_model: optionalText("model of the filter and judge stages (default: model)"),
  },
  outputs: v.object({
    shortlist: v.pipe(v.array(v.string()), v.description("the shortlisted candidate files, best first")),
    discarded: v.array(v.object({ path: v.string(), reason: v.string() })),
    rationale: v.pipe(v.string(), v.description("the judge's rationale (empty without a judge)")),
    shortlist_file: v.pipe(v.string(), v.description("shortlist.md")),
    dir: v.pipe(v.string(), v.description("the artifact directory")),
  }),
  async run(ctx) {
    const { prompt, num_candidates, shortlist_size, use_judge, max_concurrency } = ctx.inputs;
    const maker = { runner: ctx.inputs.runner, model: ctx.inputs.model };
    const judge = { runner: ctx.inputs.judge_runner ?? maker.runner, model: ctx.inputs.judge_model ?? maker.model };
    const dir = await ctx.tool("artifact-dir", {}, () => `${process.cwd()}/.atomic/runs/generate-and-filter-${ctx.runId}`);

    const results = (await ctx.parallel(
      Array.from({ length: num_candidates }, (_, i) => ({
        name: `candidate-${i + 1}`,
        ...maker,
        tools: [],
        failureMode: "return" as const,
        prompt: `You are candidate generator ${i + 1} of ${num_candidates}. Give one answer of your own; others answer too, so be distinct.\n\n${prompt}`,
      })),
      { concurrency: max_concurrency, failFast: false },
    )) as { status: string; text: string }[];
    const candidates: Record<string, string> = {};
    results.forEach((r, i) => {
      if (r.status === "completed") candidates[`candidate-${i + 1}.md`] = r.text;
    });
    const names = Object.keys(candidates);
    if (names.length === 0) ctx.exit({ status: "failed", reason: "no candidate stage answered", outputs: { dir } });
    await ctx.tool("write-candidates", names, async () => {
      for (const [file, text] of Object.entries(candidates)) await Bun.write(`${dir}/${file}`, text);
    });

    const filter = await ctx.task("filter", {
      ...judge,
      tools: [],
      schema: Filtered,
      failureMode: "return",
      prompt:
        `You are the filter. Drop duplicates and weak candidates; keep at most ${shortlist_size}, best first, by file name. ` +
        `Say why each dropped one was discarded.\n\nTask:\n${prompt}\n\n` +
        names.map((n) => `## ${n}\n${candidates[n]}`).join("\n\n"),
    });
    const filtered = filter.status === "completed" ? v.safeParse(Filtered, filter.structured) : undefined;
    const named = filtered?.success ? filtered.output.shortlist.map((p) => p.slice(p.lastIndexOf("/") + 1)) : [];
    const missing = named.filter((p) => !(p in candidates));
    let shortlist = [...new Set(named.filter((p) => p in candidates))].slice(0, shortlist_size);
    const fallback = shortlist.length === 0;
    if (fallback) shortlist = names.slice(0, shortlist_size);
    const discarded = filtered?.success ? filtered.output.discarded.filter((d) => !shortlist.includes(d.path)) : [];

    let rationale = "";
    if (use_judge && shortlist.length > 1) {
      const judged = await ctx.task("judge", {
        ...judge,
        tools: [],
        schema: Judged,
        failureMode: "return",
        prompt:
          `You are the judge. Order these shortlisted candidates best first, by file name, and give your rationale.\n\nTask:\n${prompt}\n\n` +
          shortlist.map((n) => `## ${n}\n${candidates[n]}`).join("\n\n"),
      });
      const parsed = judged.status === "completed" ? v.safeParse(Judged, judged.structured) : undefined;
      if (parsed?.success) {
        const ordered = [...new Set(parsed.output.order.filter((p) => shortlist.includes(p)))];
        shortlist = [...ordered, ...shortlist.filter((p) => !ordered.includes(p))];
        rationale = parsed.output.rationale;
      }
    }
    const shortlistFile = `${dir}/shortlist.md`;
    await ctx.tool("write-shortlist", shortlist, async () => {
      await Bun.write(`${dir}/filter.json`, JSON.stringify({ shortlist, discarded, missing, fallback, filter_error: filter.error ?? null }, null, 2) + "\n");
      const body = shortlist.map((n, i) => `## ${i + 1}. ${n}\n\n${candidates[n]}\n`).join("\n");
      await Bun.write(shortlistFile, `# Shortlist\n\n${rationale ? `${rationale}\n\n` : ""}${body}`);
    });
    return { shortlist: shortlist.map((n) => `${dir}/${n}`), discarded, rationale, shortlist_file: shortlistFile, dir };
  },
});
