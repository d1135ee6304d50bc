/**
 * tournament: several attempts at one prompt in parallel, one judge stage
 * per criterion scoring every attempt (in parallel), and a reducer stage
 * that combines their scores into the ranking.
 *
 *   atomic run tournament --input prompt="Write the release announcement" --input num_attempts=4 --input models=gpt-5 --input models=gpt-5-mini
 *
 * The attempts may read the working directory but not change it (they run
 * at once, in the same place); judges and the reducer get no tools.
 *
 * Judging:
 * - one stage `judge-<criterion>` per item of `criteria`, all at once: it
 *   sees every attempt that answered and answers {scores: [{attempt, score
 *   1-10, rationale}]}, one score per attempt. An answer that is not that
 *   (the stage failed, no valid structured answer, an attempt missing or
 *   scored twice) is re-asked once by a `-again` stage; still unusable, the
 *   judge has failed: its criterion is left out of the combination and
 *   named in `judge_failures`. When every judge failed the run fails.
 * - the combination: an attempt's score is the mean of its scores over the
 *   criteria whose judge answered. Attempts with the same mean tie.
 * - the reducer stage `reduce` gets the score table and the tied attempts'
 *   answers and answers {ranking: [attempt, …] best first, rationale}. Its
 *   ranking must hold every attempt once and follow the means (it orders
 *   only tied attempts as it sees fit: `tie_break` "reducer"); an unusable
 *   one is re-asked once (`reduce-again`), and still unusable the ranking
 *   is by the means with ties broken by attempt number (`tie_break`
 *   "attempt number", the reducer's error kept in scores.json).
 *
 * Artifacts, under <cwd>/.atomic/runs/tournament-<run id>/: attempt-N.md
 * (each attempt that answered), scores.json (every judge's scores or
 * failure, the means, the ties, the reducer's answer, the ranking and the
 * usage of each phase) and winner.md (the winning attempt).
 */
import { workflow, v } from "atomic";

const count = (min: number, max: number, fallback: number, what: string) =>
  v.optional(v.pipe(v.number(), v.integer(), v.minValue(min), v.maxValue(max), v.description(what)), fallback);
const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));

const Scores = v.object({
  scores: v.array(v.object({ attempt: v.pipe(v.number(), v.integer()), score: v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(10)), rationale: v.string() })),
});
type Scores = v.InferOutput<typeof Scores>;
const Reduction = v.object({ ranking: v.array(v.pipe(v.number(), v.integer())), rationale: v.string() });

interface Result {
  status: string;
  text: string;
  structured?: unknown;
  error?: { message: string };
  usage?: { inputTokens: number; outputTokens: number; costMicroUsd: number; turns: number };
}
interface Criterion {
  id: string;
  text: string;
}
interface Judged {
  criterion: string;
  stage: string;
  scores: Scores["scores"] | null;
  error: string | null;
}
type Usage = { stages: number; inputTokens: number; outputTokens: number; costMicroUsd: number; turns: number };

function usageOf(results: Result[]): Usage {
  const u: Usage = { stages: results.length, inputTokens: 0, outputTokens: 0, costMicroUsd: 0, turns: 0 };
  for (const r of results) {
    u.inputTokens += r.usage?.inputTokens ?? 0;
    u.outputTokens += r.usage?.outputTokens ?? 0;
    u.costMicroUsd += r.usage?.costMicroUsd ?? 0;
    u.turns += r.usage?.turns ?? 0;
  }
  return u;
}

const slug = (s: string) =>
  s
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "") || "criterion";
const round3 = (x: number) => Math.round(x * 1000) / 1000;
const sameSet = (xs: number[], ys: number[]) => xs.length === ys.length && [...xs].sort((a, b) => a - b).every((x, i) => x === [...ys].sort((a, b) => a - b)[i]);

export default workflow({
  name: "tournament",
  description: "Run attempts in parallel, score them with one judge per criterion, rank them with a reducer",
  inputs: {
    prompt: v.pipe(v.string(), v.minLength(1), v.description("what every attempt answers")),
    num_attempts: count(2, 8, 4, "attempts"),
    max_concurrency: count(1, 12, 4, "most stages at once"),
    criteria: v.optional(
      v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.minLength(1), v.maxLength(8), v.description('what the judges weigh: one judge stage per item, "name" or "name: what it asks"')),
      ["correctness", "completeness", "clarity"],
    ),
    models: v.optional(v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.maxLength(8), v.description("models of the attempts, assigned round-robin (default: model)")), []),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    judge_runner: optionalText("runner of the judge and reducer stages (default: runner)"),
    judge_model: optionalText("model of the judge and reducer stages (default: model)"),
  },
  outputs: v.object({
    winner: v.pipe(v.string(), v.description("winner.md")),
    winner_attempt: v.number(),
    ranking: v.pipe(
      v.array(v.object({ attempt: v.number(), model: v.nullable(v.string()), score: v.number(), scores: v.record(v.string(), v.number()) })),
      v.description("best first: the mean over the criteria whose judge answered, and each of them"),
    ),
    ties: v.pipe(v.array(v.array(v.number())), v.description("groups of attempts with the same mean")),
    tie_break: v.pipe(v.picklist(["none", "reducer", "attempt number"]), v.description("who ordered tied attempts")),
    judge_failures: v.pipe(v.array(v.object({ criterion: v.string(), error: v.string() })), v.description("criteria left out: their judge failed twice")),
    scores: v.pipe(v.string(), v.description("scores.json")),
    dir: v.pipe(v.string(), v.description("the artifact directory")),
  }),
  stages: [
    { name: "attempt-N", description: "the attempts, all at once, read-only" },
    { name: "judge-<criterion>", description: "one judge per criterion, all at once, scores every attempt 1-10; -again when its answer was unusable" },
    { name: "reduce", description: "combines the scores into the ranking and orders tied attempts; reduce-again when its ranking was unusable" },
  ],
  async run(ctx) {
    const { prompt, num_attempts, max_concurrency, models } = ctx.inputs;
    const judge = { runner: ctx.inputs.judge_runner ?? ctx.inputs.runner, model: ctx.inputs.judge_model ?? ctx.inputs.model };
    const modelOf = (i: number) => (models.length > 0 ? models[(i - 1) % models.length] : ctx.inputs.model);
    const criteria: Criterion[] = ctx.inputs.criteria.map((text, i, all) => {
      const id = slug(text.split(":")[0]!);
      return { id: all.slice(0, i).some((t) => slug(t.split(":")[0]!) === id) ? `${id}-${i + 1}` : id, text };
    });
    const dir = await ctx.tool("artifact-dir", {}, () => `${process.cwd()}/.atomic/runs/tournament-${ctx.runId}`);

    const attempts = (await ctx.parallel(
      Array.from({ length: num_attempts }, (_, i) => ({
        name: `attempt-${i + 1}`,
        runner: ctx.inputs.runner,
        model: modelOf(i + 1),
        // Read-only: the attempts run at once in one directory, and must not edit each other's files.
        tools: ["read", "list", "grep"],
        failureMode: "return" as const,
        prompt: `You are attempt ${i + 1} of ${num_attempts} in a tournament; judges score the attempts. Give your best answer.\n\n${prompt}`,
      })),
      { concurrency: max_concurrency, failFast: false },
    )) as Result[];
    const texts = new Map<number, string>();
    attempts.forEach((r, i) => r.status === "completed" && texts.set(i + 1, r.text));
    const entrants = [...texts.keys()];
    if (entrants.length === 0) ctx.exit({ status: "failed", reason: "no attempt answered", outputs: { dir } });
    await ctx.tool("write-attempts", entrants, async () => {
      for (const [i, t] of texts) await Bun.write(`${dir}/attempt-${i}.md`, t);
    });
    const answersOf = (ids: number[]) => ids.map((i) => `Attempt ${i}:\n${texts.get(i)}`).join("\n\n");

    // ---- one judge per criterion, in parallel; an unusable answer asked again once
    const judgePrompt = (c: Criterion, again?: string) =>
      `You are the judge for criterion ${c.id}${again ? `, asked again: your previous answer could not be used (${again})` : ""}. ` +
      `Score every attempt from 1 (poor) to 10 (excellent) on this criterion only: ${c.text}. ` +
      `Answer with one score per attempt (attempts ${entrants.join(", ")}), each with its rationale.\n\nPrompt:\n${prompt}\n\n${answersOf(entrants)}`;
    const check = (r: Result): { scores: Scores["scores"] | null; error: string | null } => {
      if (r.status !== "completed") return { scores: null, error: r.error?.message ?? `the stage ${r.status}` };
      const parsed = v.safeParse(Scores, r.structured);
      if (!parsed.success) return { scores: null, error: `not scores: ${parsed.issues[0].message}` };
      const scored = parsed.output.scores.map((s) => s.attempt);
      if (!sameSet(scored, entrants)) return { scores: null, error: `it scored attempts ${scored.join(", ") || "none"}, not ${entrants.join(", ")} once each` };
      return { scores: parsed.output.scores, error: null };
    };
    const judgeAll = (cs: Criterion[], again?: Map<string, string>) =>
      ctx.parallel(
        cs.map((c) => ({
          name: again ? `judge-${c.id}-again` : `judge-${c.id}`,
          ...judge,
          tools: [],
          schema: Scores,
          failureMode: "return" as const,
          prompt: judgePrompt(c, again?.get(c.id)),
        })),
        { concurrency: max_concurrency, failFast: false },
      ) as Promise<Result[]>;
    const firstJudges = await judgeAll(criteria);
    const judged: Judged[] = firstJudges.map((r, i) => ({ criterion: criteria[i]!.id, stage: `judge-${criteria[i]!.id}`, ...check(r) }));
    const retry = criteria.filter((_, i) => judged[i]!.error);
    const secondJudges = retry.length ? await judgeAll(retry, new Map(retry.map((c) => [c.id, judged[criteria.indexOf(c)]!.error!]))) : [];
    retry.forEach((c, j) => {
      const i = criteria.indexOf(c);
      const second = check(secondJudges[j]!);
      judged[i] = { criterion: c.id, stage: `judge-${c.id}-again`, scores: second.scores, error: second.error && `${judged[i]!.error}; asked again: ${second.error}` };
    });
    const judge_failures = judged.filter((j) => !j.scores).map((j) => ({ criterion: j.criterion, error: j.error! }));
    const usable = judged.filter((j) => j.scores);
    if (usable.length === 0) {
      ctx.exit({ status: "failed", reason: `no judge gave usable scores (${judge_failures.map((f) => `${f.criterion}: ${f.error}`).join("; ")})`, outputs: { dir } });
    }

    // ---- the combination: the mean over the criteria whose judge answered; equal means tie
    const scoresOf = (attempt: number) => Object.fromEntries(usable.map((j) => [j.criterion, j.scores!.find((s) => s.attempt === attempt)!.score]));
    const meanOf = new Map(entrants.map((a) => [a, round3(Object.values(scoresOf(a)).reduce((x, y) => x + y, 0) / usable.length)]));
    const byMean = [...entrants].sort((a, b) => meanOf.get(b)! - meanOf.get(a)! || a - b);
    const ties = [...new Set(byMean.map((a) => meanOf.get(a)!))].map((m) => byMean.filter((a) => meanOf.get(a) === m)).filter((g) => g.length > 1);
    const tied = ties.flat();

    // ---- the reducer: the ranking from the table; it orders tied attempts; asked again once; else by attempt number
    const table = entrants.map((a) => `- attempt ${a}: ${usable.map((j) => `${j.criterion} ${scoresOf(a)[j.criterion]}`).join(", ")}; mean ${meanOf.get(a)}`).join("\n");
    const reducePrompt = (again?: string) =>
      `You are the reducer${again ? `, asked again: your previous ranking could not be used (${again})` : ""}. ` +
      `Judges scored the attempts from 1 to 10 per criterion. Combine their scores into one ranking, best first, by the mean over the criteria, holding every attempt once` +
      (ties.length ? `; attempts with the same mean tie (${ties.map((g) => g.join(" and ")).join("; ")}): order them yourself, from their answers below, and say why.` : ".") +
      `\n\nPrompt:\n${prompt}\n\nScores:\n${table}` +
      (failuresText(judge_failures)) +
      (tied.length ? `\n\nThe tied attempts' answers:\n\n${answersOf(tied)}` : "");
    const checkRanking = (r: Result): { ranking: number[] | null; rationale: string; error: string | null } => {
      if (r.status !== "completed") return { ranking: null, rationale: "", error: r.error?.message ?? `the stage ${r.status}` };
      const parsed = v.safeParse(Reduction, r.structured);
      if (!parsed.success) return { ranking: null, rationale: "", error: `not a ranking: ${parsed.issues[0].message}` };
      const { ranking, rationale } = parsed.output;
      if (!sameSet(ranking, entrants)) return { ranking: null, rationale, error: `it ranked attempts ${ranking.join(", ") || "none"}, not ${entrants.join(", ")} once each` };
      const wrong = ranking.findIndex((a, i) => i > 0 && meanOf.get(a)! > meanOf.get(ranking[i - 1]!)!);
      if (wrong > 0) return { ranking: null, rationale, error: `it ranks attempt ${ranking[wrong - 1]} (mean ${meanOf.get(ranking[wrong - 1]!)}) above attempt ${ranking[wrong]} (mean ${meanOf.get(ranking[wrong]!)})` };
      return { ranking, rationale, error: null };
    };
    const reduceStage = (again?: string) =>
      ctx.task(again ? "reduce-again" : "reduce", { ...judge, tools: [], schema: Reduction, failureMode: "return", prompt: reducePrompt(again) }) as Promise<Result>;
    const reducerResults: Result[] = [await reduceStage()];
    let reduced = checkRanking(reducerResults[0]!);
    let reducerStage = "reduce";
    if (reduced.error) {
      const first = reduced.error;
      reducerResults.push(await reduceStage(first));
      reduced = checkRanking(reducerResults[1]!);
      reducerStage = "reduce-again";
      if (reduced.error) reduced = { ...reduced, error: `${first}; asked again: ${reduced.error}` };
    }
    const order = reduced.ranking ?? byMean;
    const tie_break = ties.length === 0 ? "none" : reduced.ranking ? "reducer" : "attempt number";
    const ranking = order.map((attempt) => ({ attempt, model: modelOf(attempt) ?? null, score: meanOf.get(attempt)!, scores: scoresOf(attempt) }));
    const best = order[0]!;

    const scoresPath = `${dir}/scores.json`;
    const winnerPath = `${dir}/winner.md`;
    await ctx.tool("write-results", { best }, async () => {
      const scores = {
        criteria: criteria.map((c, i) => ({ id: c.id, text: c.text, stage: judged[i]!.stage, scores: judged[i]!.scores, error: judged[i]!.error })),
        attempts: attempts.map((r, i) => ({ attempt: i + 1, model: modelOf(i + 1) ?? null, status: r.status, error: r.error?.message ?? null })),
        means: byMean.map((attempt) => ({ attempt, mean: meanOf.get(attempt)! })),
        ties,
        reducer: { stage: reducerStage, ranking: reduced.ranking, rationale: reduced.rationale, error: reduced.error },
        tie_break,
        ranking,
        judge_failures,
        usage: { attempts: usageOf(attempts), judges: usageOf([...firstJudges, ...secondJudges]), reducer: usageOf(reducerResults) },
      };
      await Bun.write(scoresPath, JSON.stringify(scores, null, 2) + "\n");
      await Bun.write(winnerPath, texts.get(best)!);
    });
    return { winner: winnerPath, winner_attempt: best, ranking, ties, tie_break, judge_failures, scores: scoresPath, dir };
  },
});

function failuresText(failures: { criterion: string; error: string }[]): string {
  return failures.length ? `\n\nLeft out (their judge failed): ${failures.map((f) => f.criterion).join(", ")}.` : "";
}
