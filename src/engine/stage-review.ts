/**
 * A stage's git worktree seen from outside the run: what `atomic diff`,
 * `atomic review` and the console's diff view (status/stage-diff.ts) share
 * (docs/guides/worktrees.md#review).
 *
 * - `stageWorkspace`: the worktree a stage was given, as its start record
 *   says (engine/stage-workspace.ts opened it). A stage that does not exist,
 *   or has no worktree, is a usage error.
 * - `stageDiffText`: its diff against the base: of the worktree as it is now
 *   while it exists (a running stage's uncommitted edits too), else of the
 *   stage's branch.
 * - `answerReview`: the verdict on the open review (ctx.review) of the
 *   stage's branch, recorded like `atomic answer` (messaging.ts). Comments
 *   are checked first: each has text, and one on a line names a line of the
 *   new side of the diff (an added or unchanged line shown in it), so a
 *   comment never points at nothing. Every refusal is one sentence.
 */

import { existsSync } from "node:fs";
import parseDiff from "parse-diff";
import type { Journal } from "../journal/journal.ts";
import type { PromptRecord } from "../journal/prompts.ts";
import type { RunRecord } from "../journal/runs.ts";
import { UsageError } from "../shared/errors.ts";
import { git, lastWords } from "../shared/git.ts";
import type { RunId } from "../shared/ids.ts";
import { approvalAnswer, commentAnswer, reviewPrefix, type ReviewComment } from "../shared/review-answer.ts";
import { answerPrompt, type AnswerResult } from "./messaging.ts";
import { buildRunReport, flattenStages, type StepReport } from "./run-report.ts";

export type StageWorkspaceEntry = NonNullable<StepReport["workspace"]>;

export async function stageWorkspace(journal: Journal, runId: string, stage: string): Promise<StageWorkspaceEntry & { position: string; name: string }> {
  const report = await buildRunReport(journal, runId as RunId);
  const stages = report ? flattenStages(report).filter((x) => x.name === stage || x.path === stage || x.position === stage) : [];
  const found = stages.at(-1);
  if (!found) throw new UsageError("unknown_stage", `run ${runId} has no stage named ${JSON.stringify(stage)}`, { hint: `list its stages with: atomic show ${runId}` });
  if (!found.workspace) {
    throw new UsageError("no_workspace", `stage ${stage} of run ${runId} has no git worktree, so it has no diff to show or review`, {
      hint: 'give the stage workspace: "worktree" (docs/guides/worktrees.md)',
    });
  }
  return { ...found.workspace, position: found.position, name: found.name };
}

/** The stage's diff (or `--stat`) against its base; `live`: read from the worktree, which still exists. */
export async function stageDiffText(ws: StageWorkspaceEntry, stage: string, opts: { color?: boolean; stat?: boolean } = {}): Promise<{ text: string; live: boolean }> {
  const live = existsSync(ws.path);
  const where = live ? ws.path : ws.repo;
  const range = live ? [ws.baseCommit] : [ws.baseCommit, `refs/heads/${ws.branch}`];
  const out = await git(where, ["diff", "--no-ext-diff", opts.color ? "--color=always" : "--no-color", ...(opts.stat ? ["--stat"] : []), ...range]).catch(() => undefined);
  if (!out || out.code !== 0) {
    throw new UsageError("diff_failed", `the diff of stage ${stage} could not be read from ${where}: ${out ? lastWords(out) : "it is not there"}`, {
      hint: `its branch is ${ws.branch}; look at it with: git -C ${ws.repo} log ${ws.branch}`,
    });
  }
  return { text: out.stdout, live };
}

/** The open review question of the stage's branch, if a workflow waits for one. */
export async function openReview(journal: Journal, rootId: RunId, branch: string): Promise<PromptRecord | undefined> {
  return (await journal.messages.prompts(rootId, "open")).find((p) => p.question.startsWith(`${reviewPrefix(branch)}:`));
}

/** Per file of a diff (by its new path), the line numbers of the new side that it shows. */
export function diffLines(diff: string): Map<string, Set<number>> {
  const files = new Map<string, Set<number>>();
  for (const f of parseDiff(diff)) {
    const lines = new Set<number>();
    for (const chunk of f.chunks) for (const ch of chunk.changes) if (ch.type === "add") lines.add(ch.ln); else if (ch.type === "normal") lines.add(ch.ln2);
    files.set(f.to && f.to !== "/dev/null" ? f.to : f.from ?? "", lines);
  }
  return files;
}

export type Verdict = { approve: true } | { comments: ReviewComment[] };

/** The verdict recorded as the answer to the stage's open review (see the header for the checks). */
export async function answerReview(journal: Journal, run: RunRecord, stage: string, verdict: Verdict, by: string): Promise<AnswerResult & { answer: string }> {
  const ws = await stageWorkspace(journal, run.id, stage);
  let answer: string;
  if ("approve" in verdict) answer = approvalAnswer();
  else {
    if (verdict.comments.length === 0) throw new UsageError("bad_review", "a request for changes needs at least one comment", { hint: "write what should change, on a line of the diff or about the whole change" });
    const lines = diffLines((await stageDiffText(ws, stage)).text);
    for (const c of verdict.comments) {
      if (c.text.trim() === "") throw new UsageError("bad_review", `the comment${c.file ? ` on ${c.file}${c.line ? `:${c.line}` : ""}` : ""} is empty`, { hint: "write what should change there" });
      if (c.file === undefined) continue;
      const shown = lines.get(c.file);
      if (!shown) throw new UsageError("bad_review", `${c.file} is not a file the diff of stage ${stage} changes`, { hint: `see its files with: atomic diff ${run.rootId} ${stage} --stat` });
      if (c.line !== undefined && !shown.has(c.line)) throw new UsageError("bad_review", `line ${c.line} of ${c.file} is not a line the diff of stage ${stage} shows`, { hint: `comment on an added or unchanged line of its diff: atomic diff ${run.rootId} ${stage}` });
    }
    answer = commentAnswer(verdict.comments.map((c) => ({ ...c, text: c.text.trim() })));
  }
  const open = await openReview(journal, run.rootId, ws.branch);
  if (!open) {
    throw new UsageError("no_review", `stage ${stage} of run ${run.id} is not waiting for a review`, { hint: "a workflow asks for one with ctx.review(stage); see the run's questions with: atomic inbox " + run.rootId });
  }
  return { ...(await answerPrompt(journal, run, open.id, answer, by)), answer };
}
