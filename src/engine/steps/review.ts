/**
 * ctx.review(stage): a person reviews a stage's diff; the run waits,
 * durably, for the verdict. It is a ctx.ask (ask.ts: the prompt in the
 * journal, awaiting_input, the answer checkpointed and replayed) whose
 * question names the stage's branch (shared/review-answer.ts), so
 * `atomic review RUN STAGE` finds it, and whose answer is read as a review:
 * approved, or comments.
 */

import type { ReviewOptions, ReviewResult, StageResult } from "../../sdk/types.ts";
import { StepFailedError } from "../../shared/errors.ts";
import { readReview, reviewQuestion } from "../../shared/review-answer.ts";
import type { RunExecution } from "../run-execution.ts";
import { digestArgs } from "../values.ts";
import { askAt } from "./ask.ts";

export async function runReview(exec: RunExecution, stage: StageResult, opts: ReviewOptions): Promise<ReviewResult> {
  const ws = stage && typeof stage === "object" ? stage.workspace : undefined;
  const name = opts.name ?? (ws ? `review ${ws.stage}` : "review");
  if (!ws) {
    throw new StepFailedError(name, "ctx.review: the stage has no git worktree, so it has no diff to review", {
      code: "bad_review",
      hint: 'run the stage with workspace: "worktree", and give ctx.review its result',
    });
  }
  const scope = exec.scope();
  const position = scope.nextPosition();
  const question = reviewQuestion(ws.branch, ws.stage, exec.tree.lease.rootId);
  const step = { kind: "ask" as const, name, args: digestArgs({ review: ws.branch, head: ws.head }) };
  const answered = await askAt(exec, scope, position, step, question, null, opts.timeoutMs, { review: { stage: ws.stage, branch: ws.branch } });
  const review = readReview(answered.answer);
  const by = answered.by ?? null;
  return review.approved ? { approved: true, by } : { approved: false, by, comments: review.comments };
}
