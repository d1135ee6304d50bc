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
 * `rounds` follow-ups were made. With `revise: { to }`, the requested
 * changes go to a named next stage instead: `to` is its spec (name, runner,
 * model, tools…, as ctx.bestOf takes one); round n runs it as `<name>-<n>`,
 * the first in a new session, the later ones continuing the previous
 * round's, all in the reviewed stage's worktree on its branch, the comments
 * their prompt. Each review and follow-up is a step of
 * its own, so a resumed run goes on from the first one not recorded.
 */

import { join, relative } from "node:path";
import type { ReviewOptions, ReviewResult, StageResult, TaskOptions } from "../../sdk/types.ts";
import { StepFailedError } from "../../shared/errors.ts";
import { readReview, reviewQuestion, type ReviewComment } from "../../shared/review-answer.ts";
import type { StepRun } from "../step-run.ts";
import { digestArgs } from "../values.ts";
import { askAt } from "./ask.ts";
import { runStage } from "./stage.ts";

const DEFAULT_ROUNDS = 3;
const DEFAULT_ASK = "The reviewer of your change asks for changes:";
const DEFAULT_ASK_TO = "The reviewer of this change asks for changes:";
/** What `revise.to` may not name: the follow-up's prompt, place and session are the review's to give. */
const NOT_IN_TO = ["prompt", "shell", "continueFrom", "fork", "workspace", "cwd"] as const;

type Revise = { rounds: number; prompt: string; to?: TaskOptions & { name: string } };

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
    const asked = `${revise.prompt}\n${review.comments.map(commentLine).join("\n")}\n\n`;
    // Its cwd: the same place in the repository as the reviewed stage's.
    const place = { cwd: join(ws.repo, relative(ws.path, current.cwd ?? ws.path)), workspace: { worktree: { branch: ws.branch } } };
    const own = "Make these changes in this directory (your worktree, as you left it), then say what you changed.";
    if (!revise.to) {
      // Its runner and model are the continued stage's (continueFrom inherits them).
      current = await runStage(exec, `${ws.stage}-revise-${round}`, { continueFrom: current, ...place, prompt: asked + own });
    } else {
      const { name: to, ...spec } = revise.to;
      const first = `This directory is the worktree of stage ${ws.stage} (branch ${ws.branch}), as it left it. Make these changes here, then say what you changed.`;
      current = await runStage(exec, `${to}-${round}`, { ...spec, ...(round > 1 ? { continueFrom: current } : {}), ...place, prompt: asked + (round > 1 ? own : first) });
    }
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

/**
 * `revise` checked: undefined (off), or its rounds, words and next stage.
 * Without `to`, only an agent stage (one with a session) can be sent back;
 * `to` is an agent stage's spec with a name, and none of what the review
 * gives it (NOT_IN_TO).
 */
function reviseOption(name: string, value: ReviewOptions["revise"], stage: StageResult): Revise | undefined {
  if (value === undefined || value === false) return undefined;
  const o = value === true ? {} : value;
  const rounds = o && typeof o === "object" ? (o.rounds ?? DEFAULT_ROUNDS) : NaN;
  if (!o || typeof o !== "object" || !Number.isInteger(rounds) || rounds < 1 || (o.prompt !== undefined && typeof o.prompt !== "string")) {
    throw new StepFailedError(name, `ctx.review: revise ${JSON.stringify(value)} is not true or { rounds?, prompt?, to? }`, { code: "bad_review", hint: "for example revise: true, or revise: { rounds: 2 }" });
  }
  if (o.to !== undefined) return { rounds, prompt: o.prompt ?? DEFAULT_ASK_TO, to: nextStage(name, o.to) };
  if (!stage.runner) {
    throw new StepFailedError(name, `ctx.review: revise sends the comments to a follow-up turn of the stage's agent session, and stage ${stage.workspace!.stage} is not an agent stage`, {
      code: "bad_review",
      hint: "review an agent stage (one with a prompt), or leave revise out and run the follow-up yourself",
    });
  }
  return { rounds, prompt: o.prompt ?? DEFAULT_ASK };
}

/** `revise.to` checked: a stage spec with a name, for an agent, that leaves the prompt, place and session to the review. */
function nextStage(name: string, to: unknown): TaskOptions & { name: string } {
  const hint = 'for example revise: { to: { name: "fixer", runner: "openai", model: "gpt-5", tools: ["read", "write"] } }';
  if (!to || typeof to !== "object" || Array.isArray(to) || typeof (to as { name?: unknown }).name !== "string" || (to as { name: string }).name.trim() === "") {
    throw new StepFailedError(name, `ctx.review: revise.to ${JSON.stringify(to) ?? String(to)} is not a stage spec with a name`, { code: "bad_review", hint });
  }
  const spec = to as TaskOptions & { name: string };
  const given = NOT_IN_TO.filter((k) => spec[k] !== undefined);
  if (given.length > 0 || spec.runner === "shell") {
    const what = given.length > 0 ? `names ${given.join(" and ")}` : "is a shell stage";
    throw new StepFailedError(name, `ctx.review: revise.to ${spec.name} ${what}, but the next stage is an agent whose prompt is the reviewer's comments, working in the reviewed stage's worktree in a session of its own`, {
      code: "bad_review",
      hint: `leave ${given.length > 0 ? given.join(" and ") : "shell"} out of revise.to${given.includes("prompt") ? " (words before the comments go in revise.prompt)" : ""}; ${hint}`,
    });
  }
  return spec;
}

function commentLine(c: ReviewComment): string {
  return `- ${c.file ? `${c.file}${c.line ? `:${c.line}` : ""}: ` : ""}${c.text}`;
}
