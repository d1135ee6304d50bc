/**
 * `atomic diff RUN STAGE [--stat]`: what a stage with a git worktree
 * (`workspace: "worktree"`; docs/guides/worktrees.md) changed against its
 * base. While its worktree exists, the diff is of the worktree as it is now
 * (a running stage's uncommitted edits too); once gc removed it, of the
 * stage's branch. A stage without a worktree, or whose repository is gone,
 * is refused in one sentence.
 */

import { defineCommand } from "citty";
import { stageDiffText, stageWorkspace } from "../../engine/stage-review.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "diff", description: "Print the diff of a stage's git worktree against its base" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    stage: { type: "positional", description: "the stage (name, path like child/stage, or position)", required: true },
    stat: { type: "boolean", description: "only the files changed and their line counts (git diff --stat)" },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    const ws = await stageWorkspace(await s.journal(), run.id, args.stage);
    const out = await stageDiffText(ws, args.stage, { color: s.style.enabled, stat: args.stat === true });
    if (s.globals.json) return s.json({ runId: run.id, stage: args.stage, branch: ws.branch, baseCommit: ws.baseCommit, worktree: out.live ? ws.path : null, [args.stat ? "stat" : "diff"]: out.text });
    process.stdout.write(out.text);
  },
});
