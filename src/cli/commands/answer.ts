/**
 * `atomic answer RUN QUESTION "answer"`: answers a ctx.ask question. The
 * answer is recorded in the journal; the run's driver (if one runs) goes on
 * at once; a run nobody drives uses it when resumed.
 */

import { defineCommand } from "citty";
import { answerPrompt, isDriven, notifyDriver } from "../../engine/messaging.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "answer", description: "Answer a question a run asked (ctx.ask)" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    question: { type: "positional", description: "question id (atomic inbox RUN lists them)", required: true },
    answer: { type: "positional", description: "the answer", required: true },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const journal = await s.journal();
    const result = await answerPrompt(journal, run, args.question, args.answer, "cli");
    const driven = await isDriven(journal, result.runId);
    if (driven && result.status === "answered") await notifyDriver(s.globals.home, result.runId, { type: "poke" }, 1_000);
    if (s.globals.json) return s.json({ runId: result.runId, question: result.promptId, status: result.status, answer: result.prompt.answer, driven });
    s.result(`question ${result.promptId} of run ${result.runId}: ${result.status === "exists" ? "already answered so" : "answered"} ${JSON.stringify(result.prompt.answer)}`);
    if (!driven) s.info(`no process drives the run; continue it with: atomic resume ${result.runId}`);
  },
});
