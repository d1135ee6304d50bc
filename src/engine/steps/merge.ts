/**
 * ctx.merge(stages, { into, strategy? }): stage branches merged into a
 * branch, as a durable step (a tool step, `merge into <branch>` unless
 * named: checkpointed, never merged twice; branch-merge.ts does the git
 * part and says why it cannot be merged twice after a crash either).
 *
 * `stages` are stage results with a worktree (their branches) or branch
 * names; the repository is the stages' (else the run's cwd). A conflict is
 * a result (`ok: false`, the branch, files and hunks), not a failure: the
 * workflow can hand it to an agent. What cannot be merged at all (a
 * stage without a worktree, a target checked out somewhere, a branch that
 * does not exist) fails the step in one sentence and a hint, before
 * anything changed, and is not checkpointed.
 */

import type { MergeOptions, MergeResult, StageResult } from "../../sdk/types.ts";
import { StepFailedError } from "../../shared/errors.ts";
import type { StepRun } from "../step-run.ts";
import { mergeBranches } from "../branch-merge.ts";
import { runTool } from "./tool.ts";

const STRATEGIES = ["merge", "squash"] as const;

export async function runMerge(exec: StepRun, stages: readonly (StageResult | string)[], opts: MergeOptions): Promise<MergeResult> {
  const into = opts?.into;
  const name = opts?.name ?? (typeof into === "string" ? `merge into ${into}` : "merge");
  const bad = (message: string, hint: string) => new StepFailedError(name, `ctx.merge: ${message}`, { code: "bad_merge", hint });
  if (typeof into !== "string" || into.trim() === "") throw bad("needs the branch to merge into", 'for example ctx.merge([a, b], { into: "integrate" })');
  const strategy = opts.strategy ?? "merge";
  if (!(STRATEGIES as readonly string[]).includes(strategy)) throw bad(`strategy ${JSON.stringify(strategy)} is not one of ${STRATEGIES.join(", ")}`, 'leave it out for a merge commit per branch, or write strategy: "squash"');
  if (!Array.isArray(stages) || stages.length === 0) throw bad("needs at least one stage (or branch) to merge", "give it the results of stages run with workspace: \"worktree\"");
  const branches: string[] = [];
  let repo: string | undefined;
  for (const s of stages) {
    if (typeof s === "string" && s.trim() !== "") branches.push(s);
    else if (s && typeof s === "object" && s.workspace) {
      branches.push(s.workspace.branch);
      if (repo !== undefined && repo !== s.workspace.repo) throw bad(`the stages' worktrees are of two repositories, ${repo} and ${s.workspace.repo}`, "merge each repository's stages on their own");
      repo = s.workspace.repo;
    } else throw bad("a stage given to it has no git worktree, so it has no branch to merge", 'run the stage with workspace: "worktree", or name a branch');
  }
  const where = repo ?? process.cwd();
  try {
    return (await runTool(exec, name, { into, strategy, branches, repo: where }, ({ idempotencyKey }) => mergeBranches({ step: name, repo: where, into, branches, strategy, key: idempotencyKey }), { retries: 0 })) as MergeResult;
  } catch (err) {
    // Refused by git's facts (checked out elsewhere, no such branch): that sentence and hint, not the tool's wrapping.
    const cause = (err as { cause?: unknown }).cause;
    if (cause instanceof StepFailedError) throw cause;
    throw err;
  }
}
