/**
 * `atomic diff RUN STAGE [--stat]`: what a stage with a git worktree
 * (`workspace: "worktree"`; docs/guides/worktrees.md) changed against its
 * base. While its worktree exists, the diff is of the worktree as it is now
 * (a running stage's uncommitted edits too); once gc removed it, of the
 * stage's branch. A stage without a worktree, or whose repository is gone,
 * is refused in one sentence.
 */

import { defineCommand } from "citty";
import { existsSync } from "node:fs";
import { UsageError } from "../../shared/errors.ts";
import { git, lastWords } from "../../shared/git.ts";
import { session } from "../session.ts";
import { stageWorkspace } from "../stage-workspace.ts";

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
    const live = existsSync(ws.path);
    const where = live ? ws.path : ws.repo;
    const range = live ? [ws.baseCommit] : [ws.baseCommit, `refs/heads/${ws.branch}`];
    const out = await git(where, ["diff", "--no-ext-diff", s.style.enabled ? "--color=always" : "--no-color", ...(args.stat ? ["--stat"] : []), ...range]).catch(() => undefined);
    if (!out || out.code !== 0) {
      throw new UsageError("diff_failed", `the diff of stage ${args.stage} could not be read from ${where}: ${out ? lastWords(out) : "it is not there"}`, {
        hint: `its branch is ${ws.branch}; look at it with: git -C ${ws.repo} log ${ws.branch}`,
      });
    }
    if (s.globals.json) return s.json({ runId: run.id, stage: args.stage, branch: ws.branch, baseCommit: ws.baseCommit, worktree: live ? ws.path : null, [args.stat ? "stat" : "diff"]: out.stdout });
    process.stdout.write(out.stdout);
  },
});
