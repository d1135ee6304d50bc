/**
 * Git for workflows, as durable steps: a worktree of its own for a run
 * (a branch made from a base), a commit per step, a pull request opened
 * with whichever of `gh` / `glab` is installed, and the worktree removed at
 * the end (the branch and its commits stay). Every operation is a shell
 * stage (`ctx.shell`, values quoted with `sh`), so it is journaled like any
 * stage: a recorded one is never run again on resume, and each script is
 * written to be run again safely after a crash between its end and its
 * checkpoint (an existing worktree is reused, an empty commit is skipped,
 * a worktree already removed is fine).
 *
 * Failure semantics: `openWorktree` fails the step (and the run) with one
 * sentence when the directory is not a git repository or the base branch
 * does not exist. `commit` fails the step when git does. `pullRequest` and
 * `remove` never throw: a pull request that could not be opened is a
 * result with `ok: false` and git's or the CLI's last words.
 */

import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { StepFailedError } from "../shared/errors.ts";
import { sh } from "./shell.ts";
import type { StageResult, WorkflowContext } from "./types.ts";

export interface WorktreeOptions {
  /** Step names start with it ("goal": goal-worktree, goal-commit-01, …). */
  name: string;
  /** The repository (default: the run's cwd). */
  repo?: string;
  /** The branch to make (default `atomic/<name>-<run id>`). */
  branch?: string;
  /** What the branch starts from (default: the repository's current branch). */
  base?: string;
  /** Where the worktree goes, relative to the repository (default `<repo>/.atomic/worktrees/<name>-<run id>`). */
  dir?: string;
}

export interface Worktree {
  readonly path: string;
  readonly branch: string;
  /** The base branch, resolved (the repository's current branch when none was given). */
  readonly base: string;
  readonly repo: string;
  /** Commits everything changed in the worktree (nothing: no commit); resolves to HEAD's sha. */
  commit(step: string, message: string): Promise<string>;
  /** Pushes the branch to `origin` and opens a pull request (gh) or merge request (glab). */
  pullRequest(step: string, pr: { title: string; body: string }): Promise<{ ok: true; url: string; tool: string } | { ok: false; error: string }>;
  /** Removes the worktree (the branch stays). */
  remove(step: string): Promise<void>;
}

/** git's own identity when the user configured one, else atomic's (a commit must have an author). */
const IDENTITY = `-c user.name="$(git config user.name || echo atomic)" -c user.email="$(git config user.email || echo atomic@localhost)"`;

/**
 * A git worktree of the run's own on a new branch, for stages that change
 * code. Each method is a recorded shell stage, never re-run on resume.
 * Fails the run in one sentence outside a git repository or with a base
 * branch that does not exist.
 */
export async function openWorktree(ctx: WorkflowContext<any>, opts: WorktreeOptions): Promise<Worktree> {
  const repo = opts.repo ?? process.cwd();
  const branch = opts.branch ?? `atomic/${opts.name}-${ctx.runId}`;
  const path = resolve(repo, opts.dir ?? `.atomic/worktrees/${opts.name}-${ctx.runId}`);
  const made = await ctx.shell(
    `${opts.name}-worktree`,
    sh`cd ${repo} && git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "not a git repository: "${repo} >&2; exit 2; }
base=${opts.base ?? ""}
[ -n "$base" ] || base=$(git rev-parse --abbrev-ref HEAD)
git rev-parse --verify --quiet "$base^{commit}" >/dev/null || { echo "no branch or commit named $base in "${repo} >&2; exit 2; }
if [ ! -e ${path} ]; then
  if git show-ref --verify --quiet refs/heads/${branch}; then git worktree add -q ${path} ${branch}; else git worktree add -q -b ${branch} ${path} "$base"; fi
fi
echo "$base"`,
    { failureMode: "return" },
  );
  if (made.status !== "completed") {
    throw new StepFailedError(`${opts.name}-worktree`, `${opts.name}: could not make a git worktree: ${lastLine(made) || made.error?.message || "git failed"}`, {
      code: "git_failed",
      hint: "run it in a git repository with at least one commit, and name an existing base_branch",
    });
  }
  const base = made.text.trim().split("\n").at(-1)!;
  return {
    path,
    branch,
    base,
    repo,
    async commit(step, message) {
      const r = await ctx.shell(step, sh`cd ${path} && git add -A && { git diff --cached --quiet || git ` + IDENTITY + sh` commit -q -m ${message}; } && git rev-parse HEAD`);
      return r.text.trim();
    },
    async pullRequest(step, pr) {
      const r = await ctx.shell(
        step,
        sh`cd ${path} && git push -q -u origin ${branch} >&2 || exit 1
if command -v gh >/dev/null 2>&1; then echo gh; gh pr create --base ${base} --head ${branch} --title ${pr.title} --body ${pr.body}
elif command -v glab >/dev/null 2>&1; then echo glab; glab mr create --source-branch ${branch} --target-branch ${base} --title ${pr.title} --description ${pr.body} --yes
else echo "neither gh nor glab is installed" >&2; exit 3; fi`,
        { failureMode: "return" },
      );
      const lines = r.text.trim().split("\n");
      if (r.status !== "completed") return { ok: false, error: lastLine(r) || r.error?.message || "failed" };
      return { ok: true, tool: lines[0]!, url: lines.at(-1)! };
    },
    async remove(step) {
      await ctx.shell(step, sh`cd ${repo} && { [ ! -e ${path} ] || git worktree remove --force ${path}; } && git worktree prune`, { failureMode: "return" });
    },
  };
}

/** The last line a failed shell stage wrote to stderr (git's reason). */
function lastLine(r: StageResult): string {
  try {
    return r.errorPath ? readFileSync(r.errorPath, "utf8").trim().split("\n").at(-1) ?? "" : "";
  } catch {
    return "";
  }
}
