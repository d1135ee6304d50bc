/**
 * tournament: several attempts at one prompt in parallel, judged in pairs;
 * the attempt judges prefer most wins.
 *
 *   atomic run tournament --input prompt="Write the release announcement" --input num_attempts=4 --input models=gpt-5 --input models=gpt-5-mini
 *
 * The attempts may read the working directory but not change it (they run
 * at once, in the same place); judges get no tools.
 *
 * Judging, in two phases:
 * - ring: the attempts that answered, shuffled by a PRNG seeded with
 *   `seed`, form a ring; each neighbouring pair is judged n_evaluations
 *   times, the order of the two answers swapped on alternate repetitions
 *   (position bias cancels out).
 * - pivots: the `pivots` attempts ranked highest after the ring are each
 *   judged against every other attempt, n_evaluations times the same way
 *   (a pair of two pivots once).
 * A judge answers {winner: "A"|"B"|"tie", rationale}; an answer that is not
 * that (the stage failed, or no valid structured answer) is re-asked once
 * by an `-again` stage, and a judgement still invalid counts as a tie.
 * A win scores 1, a tie 0.5, a loss 0; the ranking is by mean preference
 * (score over judgements taken part in), ties broken by attempt number.
 *
 * Artifacts, under <cwd>/.atomic/runs/tournament-<run id>/: attempt-N.md
 * (each attempt that answered), comparisons.json (the ring, every
 * judgement, the ranking, planned vs executed judgement counts and the
 * usage of each phase) and winner.md (the winning attempt).
 */
import { workflow, v } from "atomic";

const count = (min: number, max: number, fallback: number, what: string) =>
  v.optional(v.pipe(v.number(), v.integer(), v.minValue(min), v.maxValue(max), v.description(what)), fallback);
const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));

const Judgement = v.object({ winner: v.picklist(["A", "B", "tie"]), rationale: v.string() });

interface Result {
  status: string;
  text: string;
  structured?: unknown;
  error?: { message: string };
  usage?: { inputTokens: number; outputTokens: number; costMicroUsd: number; turns: number };
}
interface Planned {
  name: string;
  phase: "ring" | "pivots";
  first: number;
  second: number;
}
interface Judged extends Planned {
  winner: number | null;
  valid: boolean;
  rationale: string;
}
type Usage = { stages: number; inputTokens: number; outputTokens: number; costMicroUsd: number; turns: number };

/** mulberry32: a small seeded PRNG, so a seed always gives the same ring. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

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

export default workflow({
  name: "tournament",
  description: "Run attempts in parallel, judge them in pairs, keep the one judges prefer",
  inputs: {
    prompt: v.pipe(v.string(), v.minLength(1), v.description("what every attempt answers")),
    num_attempts: count(2, 8, 4, "attempts"),
    max_concurrency: count(1, 12, 4, "most stages at once"),
    n_evaluations: count(1, 6, 2, "judgements of each pair"),
    pivots: count(0, 7, 1, "top attempts judged against every other one after the ring"),
    seed: v.optional(v.pipe(v.number(), v.integer(), v.minValue(0), v.description("seed of the ring's order")), 0),
    criteria: v.optional(
      v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.maxLength(8), v.description("what the judges weigh")),
      ["correctness", "completeness", "clarity"],
    ),
    models: v.optional(v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.maxLength(8), v.description("models of the attempts, assigned round-robin (default: model)")), []),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    judge_runner: optionalText("runner of the judge stages (default: runner)"),
    judge_model: optionalText("model of the judge stages (default: model)"),
  },
  outputs: v.object({
    winner: v.pipe(v.string(), v.description("winner.md")),
    winner_attempt: v.number(),
    ranking: v.pipe(v.array(v.object({ attempt: v.number(), model: v.nullable(v.string()), mean_preference: v.number(), judgements: v.number() })), v.description("best first")),
    planned_judgements: v.number(),
    executed_judgements: v.number(),
    comparisons: v.pipe(v.string(), v.description("comparisons.json")),
    dir: v.pipe(v.string(), v.description("the artifact directory")),
  }),
  async run(ctx) {
    const { prompt, num_attempts, max_concurrency, n_evaluations, seed, criteria, models } = ctx.inputs;
    const judge = { runner: ctx.inputs.judge_runner ?? ctx.inputs.runner, model: ctx.inputs.judge_model ?? ctx.inputs.model };
    const modelOf = (i: number) => (models.length > 0 ? models[(i - 1) % models.length] : ctx.inputs.model);
    const dir = await ctx.tool("artifact-dir", {}, () => `${process.cwd()}/.atomic/runs/tournament-${ctx.runId}`);

    const attempts = (await ctx.parallel(
      Array.from({ length: num_attempts }, (_, i) => ({
        name: `attempt-${i + 1}`,
        runner: ctx.inputs.runner,
        model: modelOf(i + 1),
        // Read-only: the attempts run at once in one directory, and must not edit each other's files.
        tools: ["read", "list", "grep"],
        failureMode: "return" as const,
        prompt: `You are attempt ${i + 1} of ${num_attempts} in a tournament; judges compare the attempts in pairs. Give your best answer.\n\n${prompt}`,
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

    const judgePrompt = (p: Planned, again?: string) =>
      `You are the judge (${p.name})${again ? `, asked again: your previous judgement could not be used (${again})` : ""}. ` +
      `Two responses answer the same prompt. Judge them on: ${criteria.join(", ")}. Answer winner "A", "B" or "tie", with your rationale.\n\n` +
      `Prompt:\n${prompt}\n\nResponse A:\n${texts.get(p.first)}\n\nResponse B:\n${texts.get(p.second)}`;
    const parse = (r: Result) => {
      if (r.status !== "completed") return { error: r.error?.message ?? `the stage ${r.status}` };
      const parsed = v.safeParse(Judgement, r.structured);
      return parsed.success ? { judgement: parsed.output } : { error: `not a judgement: ${parsed.issues[0].message}` };
    };
    const run = (planned: Planned[], again?: Map<string, string>) =>
      ctx.parallel(
        planned.map((p) => ({
          name: again ? `${p.name}-again` : p.name,
          ...judge,
          tools: [],
          schema: Judgement,
          failureMode: "return" as const,
          prompt: judgePrompt(p, again?.get(p.name)),
        })),
        { concurrency: max_concurrency, failFast: false },
      ) as Promise<Result[]>;
    /** Every planned judgement, re-asked once where invalid; still invalid counts as a tie. */
    const judgeAll = async (planned: Planned[]) => {
      const first = await run(planned);
      const parsed = first.map(parse);
      const retry = planned.filter((_, i) => parsed[i]!.error);
      const second = retry.length ? await run(retry, new Map(retry.map((p) => [p.name, parsed[planned.indexOf(p)]!.error!]))) : [];
      retry.forEach((p, j) => (parsed[planned.indexOf(p)] = parse(second[j]!)));
      const judged: Judged[] = planned.map((p, i) => {
        const j = parsed[i]!.judgement;
        const winner = !j || j.winner === "tie" ? null : j.winner === "A" ? p.first : p.second;
        return { ...p, winner, valid: !!j, rationale: j?.rationale ?? `counted as a tie: ${parsed[i]!.error}` };
      });
      return { judged, results: [...first, ...second] };
    };
    /** n_evaluations judgements of each pair, the order swapped on odd repetitions. */
    const plan = (phase: Planned["phase"], pairs: [number, number][]): Planned[] =>
      pairs.flatMap(([a, b]) =>
        Array.from({ length: n_evaluations }, (_, e) => {
          const [first, second] = e % 2 === 0 ? [a, b] : [b, a];
          return { name: `judge-${phase}-${a}-vs-${b}-${e + 1}`, phase, first, second };
        }),
      );

    const random = prng(seed);
    const ring = [...entrants];
    for (let i = ring.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [ring[i], ring[j]] = [ring[j]!, ring[i]!];
    }
    const ringPairs: [number, number][] =
      ring.length < 2 ? [] : ring.length === 2 ? [[ring[0]!, ring[1]!]] : ring.map((a, i) => [a, ring[(i + 1) % ring.length]!] as [number, number]);
    const ringPlan = plan("ring", ringPairs);
    const ringRound = await judgeAll(ringPlan);

    const rank = (judged: Judged[]) =>
      entrants
        .map((attempt) => {
          const mine = judged.filter((j) => j.first === attempt || j.second === attempt);
          const score = mine.reduce((s, j) => s + (j.winner === attempt ? 1 : j.winner === null ? 0.5 : 0), 0);
          return { attempt, model: modelOf(attempt) ?? null, mean_preference: mine.length ? Math.round((score / mine.length) * 1000) / 1000 : 0, judgements: mine.length };
        })
        .sort((x, y) => y.mean_preference - x.mean_preference || x.attempt - y.attempt);

    const pivotIds = rank(ringRound.judged)
      .slice(0, Math.min(ctx.inputs.pivots, entrants.length - 1))
      .map((r) => r.attempt);
    const pivotPairs: [number, number][] = [];
    for (const p of pivotIds) {
      for (const other of entrants) {
        if (other === p || pivotPairs.some(([a, b]) => (a === other && b === p) || (a === p && b === other))) continue;
        pivotPairs.push([p, other]);
      }
    }
    const pivotPlan = plan("pivots", pivotPairs);
    const pivotRound = pivotPlan.length ? await judgeAll(pivotPlan) : { judged: [], results: [] };

    const judged = [...ringRound.judged, ...pivotRound.judged];
    const ranking = rank(judged);
    const best = ranking[0]!.attempt;
    const comparisonsPath = `${dir}/comparisons.json`;
    const winnerPath = `${dir}/winner.md`;
    const planned = ringPlan.length + pivotPlan.length;
    const executed = ringRound.results.length + pivotRound.results.length;
    await ctx.tool("write-results", { best }, async () => {
      const comparisons = {
        seed,
        criteria,
        attempts: attempts.map((r, i) => ({ attempt: i + 1, model: modelOf(i + 1) ?? null, status: r.status, error: r.error?.message ?? null })),
        ring,
        pivots: pivotIds,
        judgements: judged.map((j) => ({ stage: j.name, phase: j.phase, a: j.first, b: j.second, winner: j.winner, valid: j.valid, rationale: j.rationale })),
        ranking,
        planned_judgements: planned,
        executed_judgements: executed,
        invalid_judgements: judged.filter((j) => !j.valid).length,
        usage: { attempts: usageOf(attempts), ring: usageOf(ringRound.results), pivots: usageOf(pivotRound.results) },
      };
      await Bun.write(comparisonsPath, JSON.stringify(comparisons, null, 2) + "\n");
      await Bun.write(winnerPath, texts.get(best)!);
    });
    return { winner: winnerPath, winner_attempt: best, ranking, planned_judgements: planned, executed_judgements: executed, comparisons: comparisonsPath, dir };
  },
});
