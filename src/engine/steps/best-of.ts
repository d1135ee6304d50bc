/**
 * ctx.bestOf(n, spec, { judge, budget?, into? }): n candidates of one stage,
 * each in a worktree of its own, a judge's choice, the winner merged
 * (docs/guides/worktrees.md#best-of-n). Built from the other steps, so each
 * part is journaled and replayed as they are:
 *
 * 1. the candidates, `<name>-1` … `<name>-n`, as a ctx.parallel group of
 *    functions (all at once; with a budget one at a time, each starting
 *    only while the earlier ones' recorded cost is below it: on replay the
 *    same results give the same decision); `failureMode: "return"`, so one
 *    failed candidate does not end the others;
 * 2. the judge: a function, called inside a tool step (its choice is
 *    checkpointed), or an agent stage answering `{ winner, reason }`;
 * 3. the target branch made from the candidates' base if it does not exist
 *    (a tool step), then ctx.merge of the winner into it. The losers'
 *    branches are left as they are.
 */

import type { BestOfOptions, BestOfResult, StageResult, StepSpec, TaskOptions } from "../../sdk/types.ts";
import { StepFailedError } from "../../shared/errors.ts";
import { git, gitOk } from "../../shared/git.ts";
import type { StepRun } from "../step-run.ts";
import { runGroup } from "./group.ts";
import { runMerge } from "./merge.ts";
import { runStage } from "./stage.ts";
import { runTool } from "./tool.ts";

const MAX_CANDIDATES = 16;
/** What a candidate's output and diff may take in an agent judge's prompt, each. */
const JUDGE_DIFF_CAP = 24 * 1024;

export async function runBestOf(exec: StepRun, n: number, spec: StepSpec & { name: string }, opts: BestOfOptions): Promise<BestOfResult> {
  const name = spec && typeof spec === "object" && typeof spec.name === "string" ? spec.name : "best-of";
  const bad = (message: string, hint: string) => new StepFailedError(name, `ctx.bestOf: ${message}`, { code: "bad_step", hint });
  if (!Number.isInteger(n) || n < 2 || n > MAX_CANDIDATES) throw bad(`n must be a whole number from 2 to ${MAX_CANDIDATES}, got ${String(n)}`, "with one candidate there is nothing to choose: run the stage itself");
  if (!spec || typeof spec !== "object" || typeof spec.name !== "string" || (spec.prompt === undefined && spec.shell === undefined)) {
    throw bad("the stage to run is { name, prompt | shell, … }", 'for example ctx.bestOf(3, { name: "fix", prompt: "Fix issue 12" }, { judge })');
  }
  const judge = opts?.judge;
  if (typeof judge !== "function" && !(judge && typeof judge === "object" && typeof judge.prompt === "string")) {
    throw bad("needs a judge: a function returning the best candidate's index, or an agent stage { prompt, … }", "for example judge: (candidates) => 0, or judge: { prompt: \"Pick the simplest correct fix\" }");
  }
  const maxCost = opts.budget?.maxCostUsd;
  if (opts.budget !== undefined && (typeof maxCost !== "number" || !Number.isFinite(maxCost) || maxCost <= 0)) throw bad("budget.maxCostUsd must be a positive number of dollars", "for example budget: { maxCostUsd: 2 }");

  const { name: _name, ...task } = spec as { name: string } & TaskOptions;
  const results: (StageResult | undefined)[] = [];
  const costUsd = () => results.reduce((sum, r) => sum + (r?.usage?.costMicroUsd ?? 0), 0) / 1e6;
  const candidates = Array.from({ length: n }, (_, k) => async () => {
    const i = k + 1;
    if (maxCost !== undefined && costUsd() >= maxCost) return undefined; // the budget is used up: never started
    const r = await runStage(exec, `${name}-${i}`, {
      ...task,
      workspace: task.workspace ?? "worktree",
      failureMode: "return",
      env: { ...task.env, BEST_OF_CANDIDATE: String(i) },
      ...(task.prompt !== undefined ? { prompt: `${task.prompt}\n\n(You are candidate ${i} of ${n}: others work on the same task independently; one of you will be chosen.)` } : {}),
    });
    results[k] = r;
    return r;
  });
  const ran = (await runGroup(exec, "parallel", candidates, { concurrency: maxCost !== undefined ? 1 : n, failFast: false })) as (StageResult | undefined)[];
  const started = ran.filter((r): r is StageResult => r !== undefined);
  const finished = started.filter((r) => r.status === "completed" && r.workspace);
  if (finished.length === 0) throw new StepFailedError(name, `ctx.bestOf: none of the ${started.length} candidates of ${name} finished`, { code: "best_of_failed", hint: `see them with: atomic show ${exec.runId}` });

  let choice: { index: number; reason?: string };
  if (typeof judge === "function") {
    const picked = await runTool(exec, `${name}-judge`, { candidates: finished.map((r) => r.workspace!.branch) }, () => judge(finished), { retries: 0 });
    choice = { index: picked as number };
  } else {
    const { name: judgeName, ...judgeTask } = judge;
    const r = await runStage(exec, judgeName ?? `${name}-judge`, {
      ...judgeTask,
      prompt: judgePrompt(judge.prompt!, finished),
      schema: { type: "object", properties: { winner: { type: "integer", minimum: 1, maximum: finished.length }, reason: { type: "string" } }, required: ["winner"], additionalProperties: false },
    });
    const s = r.structured as { winner: number; reason?: string };
    choice = { index: s.winner - 1, ...(s.reason ? { reason: s.reason } : {}) };
  }
  if (!Number.isInteger(choice.index) || choice.index < 0 || choice.index >= finished.length) {
    throw new StepFailedError(name, `ctx.bestOf: the judge chose ${String(choice.index)}, which is not one of the ${finished.length} finished candidates`, { code: "bad_judge", hint: `a function judge returns an index from 0 to ${finished.length - 1}` });
  }
  const winner = finished[choice.index]!;
  const ws = winner.workspace!;
  const into = opts.into ?? `atomic/${exec.runId}/${name}`;
  await runTool(exec, `${name}-branch`, { into, base: ws.baseCommit }, async () => {
    if ((await git(ws.repo, ["rev-parse", "--verify", "-q", `refs/heads/${into}`])).code !== 0) await gitOk(ws.repo, ["branch", into, ws.baseCommit]);
    return into;
  }, { retries: 0 });
  const merge = await runMerge(exec, [winner], { into, name: `${name}-merge` });
  return { winner: started.indexOf(winner), candidates: started, skipped: n - started.length, ...(choice.reason ? { reason: choice.reason } : {}), merge };
}

function judgePrompt(prompt: string, finished: StageResult[]): string {
  const cap = (s: string) => (s.length > JUDGE_DIFF_CAP ? `${s.slice(0, JUDGE_DIFF_CAP)}\n[… cut]` : s);
  const parts = finished.map((r, i) => `<candidate number="${i + 1}" branch="${r.workspace!.branch}">\n<output>\n${cap(r.text)}\n</output>\n<diff>\n${cap(r.workspace!.diff)}\n</diff>\n</candidate>`);
  return `${prompt}\n\n${parts.join("\n\n")}\n\nAnswer with the number of the best candidate (1 to ${finished.length}) as "winner", and why as "reason".`;
}
