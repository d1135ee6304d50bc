/**
 * GET /api/runs/:id/stages/:stage/diff: a stage's worktree diff for the
 * console's review view (page/review.js), what `atomic diff RUN STAGE`
 * prints, read into files, hunks and lines (parse-diff) with each line's
 * code coloured here by highlight.js (its language told by the file's
 * extension), so the page needs no library of its own and works offline.
 * highlight.js escapes the code it colours; a file of no language it knows
 * is escaped as it is. With it: the open review of the stage (ctx.review),
 * if a workflow waits for one.
 *
 * At most MAX_LINES lines are shown (`truncated` says so); the whole diff
 * stays `atomic diff`'s.
 */

import hljs from "highlight.js/lib/common";
import parseDiff from "parse-diff";
import type { Journal } from "../journal/journal.ts";
import type { RunRecord } from "../journal/runs.ts";
import { openReview, stageDiffText, stageWorkspace } from "../engine/stage-review.ts";

const MAX_LINES = 20_000;

export interface DiffLineView {
  kind: "add" | "del" | "ctx";
  /** The line's number in the base's file (absent for an added line). */
  old?: number;
  /** Its number in the stage's file (absent for a removed line): what a comment names. */
  new?: number;
  /** The line's code as coloured HTML (escaped). */
  html: string;
}

export interface DiffFileView {
  path: string;
  /** The path in the base, when it differs (a rename). */
  from?: string;
  status: "added" | "deleted" | "modified" | "renamed";
  additions: number;
  deletions: number;
  hunks: { header: string; lines: DiffLineView[] }[];
}

export interface StageDiffView {
  runId: string;
  stage: string;
  branch: string;
  baseCommit: string;
  /** Read from the worktree as it is now (it still exists), else from the branch. */
  live: boolean;
  files: DiffFileView[];
  truncated: boolean;
  /** The open review question of the stage, if a workflow waits for one. */
  review: { question: string; text: string } | null;
}

function colour(code: string, language: string | undefined): string {
  if (!language) return Bun.escapeHTML(code);
  return hljs.highlight(code, { language, ignoreIllegals: true }).value;
}

function languageOf(path: string): string | undefined {
  const name = path.split("/").at(-1) ?? "";
  const ext = name.includes(".") ? name.split(".").at(-1)! : name;
  return hljs.getLanguage(ext) ? ext : undefined;
}

export async function stageDiffView(journal: Journal, run: RunRecord, stage: string): Promise<StageDiffView> {
  const ws = await stageWorkspace(journal, run.id, stage);
  const { text, live } = await stageDiffText(ws, stage);
  let budget = MAX_LINES;
  const files: DiffFileView[] = [];
  for (const f of parseDiff(text)) {
    if (budget <= 0) { budget = -1; break; } // files left unshown
    const path = f.to && f.to !== "/dev/null" ? f.to : f.from ?? "";
    const language = languageOf(path);
    const hunks = f.chunks.map((chunk) => {
      const lines: DiffLineView[] = [];
      for (const ch of chunk.changes) {
        if (ch.content.startsWith("\\")) continue; // git's "\ No newline at end of file", which parse-diff keeps as a line
        if (budget-- <= 0) break;
        const code = ch.content.slice(1); // the +, - or space git puts first
        if (ch.type === "add") lines.push({ kind: "add", new: ch.ln, html: colour(code, language) });
        else if (ch.type === "del") lines.push({ kind: "del", old: ch.ln, html: colour(code, language) });
        else lines.push({ kind: "ctx", old: ch.ln1, new: ch.ln2, html: colour(code, language) });
      }
      return { header: chunk.content, lines };
    });
    const status = f.new ? "added" : f.deleted ? "deleted" : f.from && f.to && f.from !== f.to ? "renamed" : "modified";
    files.push({ path, ...(status === "renamed" ? { from: f.from! } : {}), status, additions: f.additions, deletions: f.deletions, hunks });
  }
  const open = await openReview(journal, run.rootId, ws.branch);
  return {
    runId: run.id,
    stage,
    branch: ws.branch,
    baseCommit: ws.baseCommit,
    live,
    files,
    truncated: budget < 0,
    review: open ? { question: open.id, text: open.question } : null,
  };
}
