/**
 * `atomic review RUN STAGE --approve | --comment FILE:LINE TEXT`: answers
 * the review a workflow waits for (ctx.review) of a stage with a git
 * worktree. The verdict is recorded in the journal like `atomic answer`'s
 * answer (shared/review-answer.ts says its form); the run's driver goes on
 * at once, and a run nobody drives uses it when resumed. A stage without a
 * worktree, with no review open, or a comment on a line the diff does not
 * show, is refused in one sentence (engine/stage-review.ts checks it, as for
 * the console).
 */

import { defineCommand } from "citty";
import { isDriven, notifyDriver } from "../../engine/messaging.ts";
import { answerReview, type Verdict } from "../../engine/stage-review.ts";
import { UsageError } from "../../shared/errors.ts";
import { parseFileLine } from "../../shared/review-answer.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "review", description: "Approve or comment on a stage's diff that a run waits to have reviewed (ctx.review)" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    stage: { type: "positional", description: "the stage (name, path like child/stage, or position)", required: true },
    text: { type: "positional", description: "with --comment: the comment", required: false },
    approve: { type: "boolean", description: "approve the stage's change" },
    comment: { type: "string", valueHint: "FILE:LINE", description: "request changes: a comment on that line of the diff (the text follows)" },
  },
  async run({ args }) {
    const s = session();
    const approve = args.approve === true;
    if (approve === (args.comment !== undefined)) {
      throw new UsageError("bad_flag", "atomic review needs either --approve or --comment FILE:LINE TEXT", { hint: `for example: atomic review ${args.run} ${args.stage} --comment src/app.ts:12 "handle the empty list"` });
    }
    let verdict: Verdict;
    if (approve) {
      if (args.text !== undefined) throw new UsageError("bad_flag", "--approve takes no text", { hint: "to comment, use --comment FILE:LINE TEXT" });
      verdict = { approve: true };
    } else {
      const at = parseFileLine(args.comment!);
      if (!at) throw new UsageError("bad_flag", `--comment ${JSON.stringify(args.comment)} is not FILE:LINE`, { hint: 'name the file and line the comment is about, e.g. --comment src/app.ts:12 "handle the empty list"' });
      if (args.text === undefined || args.text.trim() === "") throw new UsageError("bad_flag", "--comment needs the comment's text after it", { hint: `for example: atomic review ${args.run} ${args.stage} --comment ${args.comment} "handle the empty list"` });
      verdict = { comments: [{ ...at, text: args.text }] };
    }
    const run = await s.findRun(args.run);
    const journal = await s.journal();
    const result = await answerReview(journal, run, args.stage, verdict, "cli");
    const driven = await isDriven(journal, result.runId);
    if (driven && result.status === "answered") await notifyDriver(s.globals.home, result.runId, { type: "poke" }, 1_000);
    if (s.globals.json) return s.json({ runId: result.runId, stage: args.stage, question: result.promptId, status: result.status, answer: JSON.parse(result.answer) as unknown, driven });
    s.result(`stage ${args.stage} of run ${result.runId}: ${approve ? "approved" : `commented on ${args.comment}`}`);
    if (!driven) s.info(`no process drives the run; continue it with: atomic resume ${result.runId}`);
  },
});
