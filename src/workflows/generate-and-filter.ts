/**
 * generate-and-filter: many candidate answers in parallel, filters that
 * gather evidence about them, and an agent stage that chooses the final
 * shortlist from that evidence.
 *
 *   atomic run generate-and-filter --input prompt="Name our CLI tool" --input num_candidates=6
 *
 * The filters: checks in code (an empty answer; the same text as an earlier
 * candidate, case and spacing aside), then a filter stage that drops
 * duplicates and weak candidates with a reason each and proposes a
 * shortlist. Its answer is checked: a path that is not a candidate's, or
 * one named twice, is dropped; an empty or unusable answer falls back to
 * the first candidates.
 *
 * The choice: with use_judge (the default) the judge stage sees every
 * candidate with the filters' evidence (the checks, the filter's proposal
 * and its reasons) and chooses the final shortlist, best first, with its
 * rationale; it may keep a candidate the filter dropped. Its answer is
 * checked the same way and an unusable one is asked again once; still
 * unusable, the filter's shortlist stands (`chosen_by` says which).
 *
 * Artifacts, under <cwd>/.atomic/runs/generate-and-filter-<run id>/:
 * candidate-N.md (one per candidate that answered), filter.json (the
 * checks, the filter's proposal and what it discarded and why, paths it
 * named that do not exist, the judge's choice or why it was not used, the
 * final shortlist and every candidate left out with its reasons),
 * shortlist.md (the final order, each candidate in full).
 */
import { workflow, v } from "atomic";

const count = (min: number, max: number, fallback: number, what: string) =>
  v.optional(v.pipe(v.number(), v.integer(), v.minValue(min), v.maxValue(max), v.description(what)), fallback);
const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));

const Filtered = v.object({
  shortlist: v.array(v.string()),
  discarded: v.array(v.object({ path: v.string(), reason: v.string() })),
});
const Chosen = v.object({ shortlist: v.array(v.string()), rationale: v.string() });
const squeeze = (t: string) => t.trim().replace(/\s+/g, " ").toLowerCase();

export default workflow({
  name: "generate-and-filter",
  description: "Generate candidates in parallel, filter them with evidence, have a judge choose the shortlist",
  inputs: {
    prompt: v.pipe(v.string(), v.minLength(1), v.description("what to generate")),
    num_candidates: count(2, 20, 8, "candidates generated"),
    shortlist_size: count(1, 10, 3, "most candidates kept"),
    use_judge: v.optional(v.pipe(v.boolean(), v.description("a judge stage chooses the final shortlist from the filters' evidence (else the filter's shortlist stands)")), true),
    max_concurrency: count(1, 12, 4, "most candidate stages at once"),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    judge_runner: optionalText("runner of the filter and judge stages (default: runner)"),
    judge_model: optionalText("model of the filter and judge stages (default: model)"),
  },
  outputs: v.object({
    shortlist: v.pipe(v.array(v.string()), v.description("the shortlisted candidate files, best first")),
    discarded: v.pipe(v.array(v.object({ path: v.string(), reason: v.string() })), v.description("every candidate left out, with the filters' reasons")),
    rationale: v.pipe(v.string(), v.description("the judge's rationale (empty when the judge did not choose)")),
    chosen_by: v.pipe(v.picklist(["judge", "filter", "first candidates"]), v.description("who chose the final shortlist")),
    shortlist_file: v.pipe(v.string(), v.description("shortlist.md")),
    dir: v.pipe(v.string(), v.description("the artifact directory")),
  }),
  stages: [
    { name: "candidate-N", description: "the candidates, all at once" },
    { name: "filter", description: "drops duplicates and weak candidates with reasons, proposes a shortlist" },
    { name: "judge", description: "chooses the final shortlist from the filters' evidence (use_judge); judge-again when its answer was unusable" },
  ],
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

    // The checks in code: an empty answer, or the same text as an earlier candidate.
    const checks: { path: string; reason: string }[] = [];
    names.forEach((n, i) => {
      if (squeeze(candidates[n]!) === "") checks.push({ path: n, reason: "an empty answer" });
      else {
        const same = names.slice(0, i).find((m) => squeeze(candidates[m]!) === squeeze(candidates[n]!));
        if (same) checks.push({ path: n, reason: `the same text as ${same}` });
      }
    });
    const checksText = checks.length ? `\n\nChecks found:\n${checks.map((c) => `- ${c.path}: ${c.reason}`).join("\n")}` : "";
    const all = names.map((n) => `## ${n}\n${candidates[n]}`).join("\n\n");

    const filter = await ctx.task("filter", {
      ...judge,
      tools: [],
      schema: Filtered,
      failureMode: "return",
      prompt:
        `You are the filter. Drop duplicates and weak candidates; keep at most ${shortlist_size}, best first, by file name. ` +
        `Say why each dropped one was discarded.\n\nTask:\n${prompt}${checksText}\n\n${all}`,
    });
    const filtered = filter.status === "completed" ? v.safeParse(Filtered, filter.structured) : undefined;
    /** The candidates a list names, each once, at most shortlist_size; and the names that are no candidate's. */
    const usable = (paths: string[]) => {
      const bare = paths.map((p) => p.slice(p.lastIndexOf("/") + 1));
      return { kept: [...new Set(bare.filter((p) => p in candidates))].slice(0, shortlist_size), missing: bare.filter((p) => !(p in candidates)) };
    };
    const proposal = usable(filtered?.success ? filtered.output.shortlist : []);
    const missing = proposal.missing;
    const fallback = proposal.kept.length === 0;
    let shortlist = fallback ? names.slice(0, shortlist_size) : proposal.kept;
    const filterDiscarded = filtered?.success ? filtered.output.discarded : [];
    let chosen_by: "judge" | "filter" | "first candidates" = fallback ? "first candidates" : "filter";

    let rationale = "";
    let judged: { shortlist: string[] | null; rationale: string; error: string | null; missing: string[] } | null = null;
    if (use_judge) {
      const evidence =
        `The filter proposed: ${shortlist.join(", ")}${fallback ? " (its answer was unusable: these are the first candidates)" : ""}.` +
        (filterDiscarded.length ? `\nIt discarded:\n${filterDiscarded.map((d) => `- ${d.path}: ${d.reason}`).join("\n")}` : "") +
        checksText;
      const ask = (again?: string) =>
        ctx.task(again ? "judge-again" : "judge", {
          ...judge,
          tools: [],
          schema: Chosen,
          failureMode: "return",
          prompt:
            `You are the judge${again ? `, asked again: your previous answer could not be used (${again})` : ""}. ` +
            `Choose the final shortlist of at most ${shortlist_size} candidates, best first, by file name, from the filters' evidence and the candidates themselves, and give your rationale; ` +
            `you may keep a candidate the filter dropped.\n\nTask:\n${prompt}\n\nEvidence:\n${evidence}\n\n${all}`,
        });
      const check = (r: { status: string; structured?: unknown; error?: { message: string } }) => {
        if (r.status !== "completed") return { shortlist: null, rationale: "", error: r.error?.message ?? `the stage ${r.status}`, missing: [] };
        const parsed = v.safeParse(Chosen, r.structured);
        if (!parsed.success) return { shortlist: null, rationale: "", error: `not a choice: ${parsed.issues[0].message}`, missing: [] };
        const picked = usable(parsed.output.shortlist);
        if (picked.kept.length === 0) return { shortlist: null, rationale: parsed.output.rationale, error: `it named no candidate (${parsed.output.shortlist.join(", ") || "none"})`, missing: picked.missing };
        return { shortlist: picked.kept, rationale: parsed.output.rationale, error: null, missing: picked.missing };
      };
      judged = check(await ask());
      if (judged.error) {
        const first = judged.error;
        judged = check(await ask(first));
        if (judged.error) judged = { ...judged, error: `${first}; asked again: ${judged.error}` };
      }
      if (judged.shortlist) {
        shortlist = judged.shortlist;
        rationale = judged.rationale;
        chosen_by = "judge";
      }
    }
    // Every candidate left out, with the filters' reasons.
    const discarded = names
      .filter((n) => !shortlist.includes(n))
      .map((path) => {
        const reasons = [...checks.filter((c) => c.path === path).map((c) => c.reason), ...filterDiscarded.filter((d) => d.path === path).map((d) => d.reason)];
        return { path, reason: reasons.length ? reasons.join("; ") : `not chosen by the ${chosen_by === "judge" ? "judge" : "filter"}` };
      });
    const shortlistFile = `${dir}/shortlist.md`;
    await ctx.tool("write-shortlist", shortlist, async () => {
      const filterPart = { proposal: fallback ? [] : proposal.kept, discarded: filterDiscarded, missing, fallback, error: filter.error?.message ?? (filtered && !filtered.success ? `not a filter answer: ${filtered.issues[0].message}` : null) };
      await Bun.write(`${dir}/filter.json`, JSON.stringify({ checks, filter: filterPart, judge: judged, chosen_by, shortlist, discarded }, null, 2) + "\n");
      const body = shortlist.map((n, i) => `## ${i + 1}. ${n}\n\n${candidates[n]}\n`).join("\n");
      await Bun.write(shortlistFile, `# Shortlist\n\n${rationale ? `${rationale}\n\n` : ""}${body}`);
    });
    return { shortlist: shortlist.map((n) => `${dir}/${n}`), discarded, rationale, chosen_by, shortlist_file: shortlistFile, dir };
  },
});
