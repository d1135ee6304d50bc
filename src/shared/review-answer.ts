/**
 * A review's answer (ctx.review, `atomic review`; docs/guides/worktrees.md#review):
 * the question a review asks (its first words name the branch, so `atomic
 * review` finds the open review of a stage), the answer `atomic review`
 * writes (JSON), and how any answer reads as a review: that JSON, or from
 * `atomic answer` / the page, "approve" (or approved, yes, lgtm) or else
 * one comment about the whole change.
 */

export interface ReviewComment {
  file?: string;
  line?: number;
  text: string;
}

export function reviewQuestion(branch: string, stage: string, runId: string): string {
  return `${reviewPrefix(branch)}: see it with atomic diff ${runId} ${stage}, then answer with atomic review ${runId} ${stage} --approve, or --comment FILE:LINE TEXT`;
}

/** What every review question of `branch` starts with. */
export function reviewPrefix(branch: string): string {
  return `Review the diff of branch ${branch}`;
}

export function approvalAnswer(): string {
  return JSON.stringify({ approved: true });
}

export function commentAnswer(comments: ReviewComment[]): string {
  return JSON.stringify({ approved: false, comments });
}

const APPROVALS = new Set(["approve", "approved", "yes", "lgtm", "ok"]);

/** An answer read as a review. */
export function readReview(answer: string): { approved: true } | { approved: false; comments: ReviewComment[] } {
  try {
    const v = JSON.parse(answer) as { approved?: unknown; comments?: unknown };
    if (v && typeof v === "object" && v.approved === true) return { approved: true };
    if (v && typeof v === "object" && v.approved === false && Array.isArray(v.comments)) {
      const comments = v.comments.filter((c): c is ReviewComment => !!c && typeof c === "object" && typeof (c as ReviewComment).text === "string");
      if (comments.length > 0) return { approved: false, comments };
    }
  } catch {
    // not JSON: words
  }
  if (APPROVALS.has(answer.trim().toLowerCase())) return { approved: true };
  return { approved: false, comments: [{ text: answer.trim() }] };
}

/** `FILE:LINE` checked: the file and a positive line, or undefined. */
export function parseFileLine(text: string): { file: string; line: number } | undefined {
  const m = /^(.+):([1-9][0-9]*)$/.exec(text.trim());
  return m ? { file: m[1]!, line: Number(m[2]) } : undefined;
}
