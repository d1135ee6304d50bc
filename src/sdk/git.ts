/**
 * Git for workflows that change a repository on a branch of their own (the
 * branch and its worktree come from the stage option `workspace`;
 * docs/guides/worktrees.md), as durable steps:
 *
 * - `baseBranch`: the branch the work starts from, fixed once by a
 *   recorded step (the one named, else the checkout's current branch), so
 *   a resumed run opens its pull request against the same branch;
 * - `openPullRequest`: pushes the branch to `origin` and opens a pull
 *   request with whichever of `gh` / `glab` is installed, as a shell stage
 *   (values quoted with `sh`), journaled like any stage;
 * - `commitFiles`: copies files (a run's artifacts, e.g. QA evidence) into
 *   the branch's checkout and commits them there, as a recorded step, so a
 *   pull request can link them by their place in the repository.
 *
 * Failure semantics: `baseBranch` fails the step in one sentence outside a
 * git repository or with a base that does not exist; `openPullRequest` and
 * `commitFiles` never throw: a pull request that could not be opened or
 * files that could not be committed are a result with `ok: false` and
 * git's or the CLI's last words.
 */

import { copyFileSync, mkdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { StepFailedError } from "../shared/errors.ts";
import { git as runGit, gitOk, identity } from "../shared/git.ts";
import { sh } from "./shell.ts";
import type { StageResult, WorkflowContext } from "./types.ts";

/**
 * The branch the run's work starts from: `named`, else the checkout's
 * current branch, fixed by the recorded step "base-branch". Outside a git
 * repository (or one without a commit), or with a `named` branch that does
 * not exist, it fails the step in one sentence before any stage starts.
 */
export async function baseBranch(ctx: WorkflowContext<any>, who: string, named: string | undefined): Promise<string> {
  const found = await ctx.tool("base-branch", { named: named ?? null }, async () => {
    const cwd = process.cwd();
    const read = async (...args: string[]) => {
      const r = await runGit(cwd, args).catch(() => undefined); // no git at all reads as no repository
      return r?.code === 0 ? r.stdout.trim() : undefined;
    };
    if ((await read("rev-parse", "--verify", "-q", "HEAD^{commit}")) === undefined) return { problem: `${cwd} is not in a git repository with a commit` };
    if (named) return (await read("rev-parse", "--verify", "-q", `${named}^{commit}`)) === undefined ? { problem: `there is no branch or commit named ${named} in ${cwd}` } : { base: named };
    return { base: (await read("rev-parse", "--abbrev-ref", "HEAD")) ?? "HEAD" };
  });
  if ("problem" in found) {
    throw new StepFailedError("base-branch", `${who}: ${found.problem}, and its work goes on a git branch of its own`, {
      code: "git_failed",
      hint: "run it in a git repository with at least one commit, and name an existing base_branch",
    });
  }
  return found.base;
}

export interface PullRequest {
  /** A checkout of the branch (a stage's worktree: `result.workspace.path`). */
  cwd: string;
  branch: string;
  /** The branch the pull request goes into. */
  base: string;
  title: string;
  body: string;
}

/** Pushes `branch` to `origin` and opens a pull request (gh) or merge request (glab), as the shell stage `step`. */
export async function openPullRequest(ctx: WorkflowContext<any>, step: string, pr: PullRequest): Promise<{ ok: true; url: string; tool: string } | { ok: false; error: string }> {
  const r = await ctx.shell(
    step,
    sh`cd ${pr.cwd} && git push -q -u origin ${pr.branch} >&2 || exit 1
if command -v gh >/dev/null 2>&1; then echo gh; gh pr create --base ${pr.base} --head ${pr.branch} --title ${pr.title} --body ${pr.body}
elif command -v glab >/dev/null 2>&1; then echo glab; glab mr create --source-branch ${pr.branch} --target-branch ${pr.base} --title ${pr.title} --description ${pr.body} --yes
else echo "neither gh nor glab is installed" >&2; exit 3; fi`,
    { failureMode: "return" },
  );
  const lines = r.text.trim().split("\n");
  if (r.status !== "completed") return { ok: false, error: lastLine(r) || r.error?.message || "failed" };
  return { ok: true, tool: lines[0]!, url: lines.at(-1)! };
}

export interface CommitFiles {
  /** A checkout of the branch (a stage's worktree: `result.workspace.path`). */
  cwd: string;
  /** The files to commit (absolute paths), each kept at its place relative to `base`. */
  files: string[];
  base: string;
  /** Where they go, relative to the checkout's root. */
  into: string;
  message: string;
}

/**
 * Copies `files` into the checkout under `into` and commits them on its branch (the user's git identity if
 * configured, else atomic's), as the recorded step `step`: the committed paths, relative to the repository's
 * root. Run again (a resume) it copies the same files and commits nothing new.
 */
export async function commitFiles(ctx: WorkflowContext<any>, step: string, c: CommitFiles): Promise<{ ok: true; paths: string[] } | { ok: false; error: string }> {
  const done = await ctx.tool(
    step,
    { files: c.files, into: c.into },
    async () => {
      const paths = c.files.map((f) => join(c.into, relative(c.base, f)));
      for (const [k, f] of c.files.entries()) {
        const to = join(c.cwd, paths[k]!);
        mkdirSync(dirname(to), { recursive: true });
        copyFileSync(f, to);
      }
      await gitOk(c.cwd, ["add", "--", ...paths]);
      const staged = await runGit(c.cwd, ["diff", "--cached", "--quiet", "--", ...paths]);
      if (staged.code !== 0) await gitOk(c.cwd, [...(await identity(c.cwd)), "commit", "--quiet", "--no-verify", "-m", c.message, "--", ...paths]);
      return paths;
    },
    { failureMode: "return", retries: 0 },
  );
  return done.ok ? { ok: true, paths: done.value } : { ok: false, error: done.error.message };
}

/** The last line a failed shell stage wrote to stderr (git's reason). */
function lastLine(r: StageResult): string {
  try {
    return r.errorPath ? readFileSync(r.errorPath, "utf8").trim().split("\n").at(-1) ?? "" : "";
  } catch {
    return "";
  }
}
