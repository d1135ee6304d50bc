/**
 * ctx.review(stage): a person reviews a stage's diff; the run waits,
 * durably, for the verdict. It is a ctx.ask (ask.ts: the prompt in the
 * journal, awaiting_input, the answer checkpointed and replayed) whose
 * question names the stage's branch (shared/review-answer.ts), so
 * `atomic review RUN STAGE` and the console find it, and whose answer is
 * read as a review: approved, or comments.
 *
 * With `revise`, requested changes go back to the stage by themselves: a
 * follow-up stage `<stage>-revise-<n>` continues the reviewed stage's agent
 * session (the last follow-up's, from the second on) with the comments as
 * its prompt, in the same worktree on the same branch (stage-workspace.ts
 * finds the earlier stage's worktree of a branch named again), and its
 * diff, against the same base, is reviewed again: until approved, or
 * `rounds` follow-ups were made. Each review and follow-up is a step of
 * its own, so a resumed run goes on from the first one not recorded.
 */

import { join, relative } from "node:path";
import type { ReviewOptions, ReviewResult, StageResult } from "../../sdk/types.ts";
import { StepFailedError } from "../../shared/errors.ts";
import { readReview, reviewQuestion, type ReviewComment } from "../../shared/review-answer.ts";
import type { StepRun } from "../step-run.ts";
import { digestArgs } from "../values.ts";
import { askAt } from "./ask.ts";
import { runStage } from "./stage.ts";

const DEFAULT_ROUNDS = 3;
const DEFAULT_ASK = "The reviewer of your change asks for changes:";

export async function runReview(exec: StepRun, stage: StageResult, opts: ReviewOptions = {}): Promise<ReviewResult> {
  const ws = stage && typeof stage === "object" ? stage.workspace : undefined;
  const name = opts.name ?? (ws ? `review ${ws.stage}` : "review");
  if (!ws) {
    throw new StepFailedError(name, "ctx.review: the stage has no git worktree, so it has no diff to review", {
      code: "bad_review",
      hint: 'run the stage with workspace: "worktree", and give ctx.review its result',
    });
  }
  const revise = reviseOption(name, opts.revise, stage);
  let current = stage;
  for (let round = 1; ; round++) {
    const review = await askReview(exec, current, round === 1 ? name : `${name} (round ${round})`, opts.timeoutMs);
    if (!revise) return review;
    if (review.approved || round > revise.rounds) return { ...review, stage: current };
    // Its runner and model are the continued stage's (continueFrom inherits them); its cwd the same place in the repository.
    current = await runStage(exec, `${ws.stage}-revise-${round}`, {
      continueFrom: current,
      cwd: join(ws.repo, relative(ws.path, current.cwd ?? ws.path)),
      workspace: { worktree: { branch: ws.branch } },
      prompt: `${revise.prompt}\n${review.comments.map(commentLine).join("\n")}\n\nMake these changes in this directory (your worktree, as you left it), then say what you changed.`,
    });
  }
}

async function askReview(exec: StepRun, stage: StageResult, name: string, timeoutMs: number | undefined): Promise<ReviewResult> {
  const ws = stage.workspace!;
  const scope = exec.scope();
  const position = scope.nextPosition();
  const question = reviewQuestion(ws.branch, ws.stage, exec.tree.lease.rootId);
  const step = { kind: "ask" as const, name, args: digestArgs({ review: ws.branch, head: ws.head }) };
  const answered = await askAt(exec, scope, position, step, question, null, timeoutMs, { review: { stage: ws.stage, branch: ws.branch } });
  const review = readReview(answered.answer);
  const by = answered.by ?? null;
  return review.approved ? { approved: true, by } : { approved: false, by, comments: review.comments };
}

/** `revise` checked: undefined (off), or its rounds and words. Only an agent stage (one with a session) can be sent back. */
function reviseOption(name: string, value: ReviewOptions["revise"], stage: StageResult): { rounds: number; prompt: string } | undefined {
  if (value === undefined || value === false) return undefined;
  const o = value === true ? {} : value;
  const rounds = o && typeof o === "object" ? (o.rounds ?? DEFAULT_ROUNDS) : NaN;
  if (!o || typeof o !== "object" || !Number.isInteger(rounds) || rounds < 1 || (o.prompt !== undefined && typeof o.prompt !== "string")) {
    throw new StepFailedError(name, `ctx.review: revise ${JSON.stringify(value)} is not true or { rounds?, prompt? }`, { code: "bad_review", hint: "for example revise: true, or revise: { rounds: 2 }" });
  }
  if (!stage.runner) {
    throw new StepFailedError(name, `ctx.review: revise sends the comments to a follow-up turn of the stage's agent session, and stage ${stage.workspace!.stage} is not an agent stage`, {
      code: "bad_review",
      hint: "review an agent stage (one with a prompt), or leave revise out and run the follow-up yourself",
    });
  }
  return { rounds, prompt: o.prompt ?? DEFAULT_ASK };
}

function commentLine(c: ReviewComment): string {
  return `- ${c.file ? `${c.file}${c.line ? `:${c.line}` : ""}: ` : ""}${c.text}`;
}
