/**
 * best-of-n: n agents try the same change to a repository, each in a git
 * worktree of its own; a judge agent reads their diffs and picks one; the
 * winner is merged into a branch of the run's own (ctx.bestOf). The other
 * candidates' branches stay for inspection; the checkout is never touched.
 *
 *   atomic run best-of-n --input prompt="Fix the flaky test in test/net.test.ts" --input n=3 --input max_cost=2
 *
 * Run it from inside the repository (its checkout with no uncommitted
 * changes: the candidates start from its current commit). `max_cost`: the
 * candidates' shared budget in dollars (they then run one after another,
 * and one starts only while the earlier ones cost less). `into`: the branch
 * the winner is merged into (default atomic/<run id>/candidate).
 *
 * Durability: each candidate, the judge and the merge are steps of their
 * own; a resumed run goes on from the first one not recorded, a candidate
 * killed mid-way in the same worktree.
 */
import { workflow, v } from "atomic";

const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));

export default workflow({
  name: "best-of-n",
  description: "n agents try the same change in worktrees of their own; a judge picks one; it is merged",
  inputs: {
    prompt: v.pipe(v.string(), v.minLength(1), v.description("the change to make")),
    n: v.optional(v.pipe(v.number(), v.integer(), v.minValue(2), v.maxValue(16), v.description("how many candidates")), 3),
    judge_prompt: optionalText("what the judge looks for (default: the correct, simplest and best-tested change)"),
    max_cost: v.optional(v.pipe(v.number(), v.minValue(0), v.description("the candidates' shared budget in dollars (0: none)")), 0),
    into: optionalText("the branch the winner is merged into (default atomic/<run id>/candidate)"),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of the candidates"),
    judge_model: optionalText("model of the judge (default: model)"),
  },
  outputs: v.object({
    winner: v.pipe(v.string(), v.description("the winning candidate's branch")),
    into: v.pipe(v.string(), v.description("the branch it was merged into")),
    candidates: v.pipe(v.array(v.string()), v.description("every candidate's branch, kept")),
    skipped: v.pipe(v.number(), v.description("candidates never started, the budget used up")),
    reason: v.string(),
  }),
  stages: [
    { name: "candidate-N", description: "candidate N makes the change in its own worktree" },
    { name: "judge", description: "reads every candidate's output and diff, picks one" },
    { name: "candidate-merge", description: "merges the winner's branch" },
  ],
  async run(ctx) {
    const { prompt, n, max_cost } = ctx.inputs;
    const best = await ctx.bestOf(
      n,
      { name: "candidate", prompt: `Make this change in the repository of your working directory, and commit it:\n\n${prompt}`, runner: ctx.inputs.runner, model: ctx.inputs.model },
      {
        judge: {
          name: "judge",
          runner: ctx.inputs.runner,
          model: ctx.inputs.judge_model ?? ctx.inputs.model,
          prompt: `Candidates made this change, each on its own:\n\n${prompt}\n\n${ctx.inputs.judge_prompt ?? "Pick the one that is correct, the simplest, and best tested."}`,
        },
        ...(max_cost > 0 ? { budget: { maxCostUsd: max_cost } } : {}),
        ...(ctx.inputs.into ? { into: ctx.inputs.into } : {}),
      },
    );
    return {
      winner: best.candidates[best.winner]!.workspace!.branch,
      into: best.merge.into,
      candidates: best.candidates.flatMap((c) => (c.workspace ? [c.workspace.branch] : [])),
      skipped: best.skipped,
      reason: best.reason ?? "",
    };
  },
});
