/**
 * A stage's git worktree (`workspace: "worktree"`; docs/design/worktrees.md).
 *
 * Opened in the root before the stage's first attempt, from the repository
 * of the stage's cwd:
 *
 * - the branch: `worktree.branch`, else `atomic/<run id>/<position>-<stage>`;
 * - the base: `worktree.base`, else the checkout's current commit, which
 *   must have no uncommitted changes (they would be left out silently: the
 *   step is refused naming them; atomic's own `.atomic/` directory does not
 *   count);
 * - the directory: `<git common dir>/atomic-worktrees/<run id>/<position>-<stage>`,
 *   inside the repository's git directory, so it never shows as an
 *   untracked file of the checkout;
 * - the base commit is kept as the ref `refs/atomic-base/<branch>`, written
 *   before the branch, so a resumed attempt (or `atomic diff` after gc)
 *   knows it whatever happened in between.
 *
 * Reuse: a worktree already at the directory on the branch is the stage's
 * own (a resumed attempt, after kill -9): used as it is, uncommitted work
 * included. A branch that exists with its base ref is an earlier stage's
 * (one that named the same branch: a follow-up turn, the next turn of a
 * loop): the stage works on in that stage's worktree while it is there, and
 * gets a worktree back when gc removed it. A branch that exists without one is the user's:
 * refused. Every refusal happens before anything is made; a `git worktree
 * add` that fails takes its base ref back, so a refused step leaves no
 * worktree, branch or ref behind.
 *
 * Settled after the stage's last attempt: what the stage left uncommitted
 * (untracked files too, but ignored ones) is committed by atomic, then the
 * commits since the base and the diff (written whole to the attempt's
 * `workspace.diff`) go into the result.
 */

import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { StageWorkspace, WorkspaceOption } from "../sdk/types.ts";
import { StepFailedError } from "../shared/errors.ts";
import { git, gitOk, identity, lastWords } from "../shared/git.ts";
import { slug } from "./values.ts";

/** An opened worktree: what the journal records (step_started's `workspace`) and gc reads. */
export interface WorkspaceRecord {
  repo: string;
  /** The repository's common git directory (holds every worktree's metadata). */
  gitDir: string;
  path: string;
  /** Where the stage runs: the worktree's directory matching the stage's cwd. */
  cwd: string;
  branch: string;
  base: string;
  baseCommit: string;
}

export const BASE_REF_PREFIX = "refs/atomic-base/";
const DIFF_CAP = 64 * 1024;
const EXAMPLE = 'write workspace: "worktree", or workspace: { worktree: { base: "main", branch: "try/one" } }';

/** The option checked: undefined (no worktree), or what it asks for. A bad one fails the step (`bad_step`). */
export function workspaceOption(name: string, value: unknown): { base?: string; branch?: string } | undefined {
  if (value === undefined || value === null) return undefined;
  if (value === "worktree") return {};
  const inner = typeof value === "object" && !Array.isArray(value) && Object.keys(value).length === 1 ? (value as { worktree?: unknown }).worktree : undefined;
  if (inner !== undefined && inner !== null && typeof inner === "object" && !Array.isArray(inner)) {
    const { base, branch, ...rest } = inner as Record<string, unknown>;
    if (Object.keys(rest).length === 0 && (base === undefined || (typeof base === "string" && base.trim() !== "")) && (branch === undefined || (typeof branch === "string" && branch.trim() !== ""))) {
      return { ...(base !== undefined ? { base: base as string } : {}), ...(branch !== undefined ? { branch: branch as string } : {}) };
    }
  }
  throw new StepFailedError(name, `stage "${name}": workspace ${JSON.stringify(value)} is not a workspace`, { code: "bad_step", hint: EXAMPLE });
}

function refuse(name: string, message: string, hint: string): StepFailedError {
  return new StepFailedError(name, `stage "${name}": ${message}`, { code: "bad_workspace", hint });
}

/** Opens (or finds again) the stage's worktree; see the header for the rules. */
export async function openWorkspace(name: string, position: string, runId: string, asked: WorkspaceOption, cwd: string): Promise<WorkspaceRecord> {
  const opt = workspaceOption(name, asked)!;
  const top = await git(cwd, ["rev-parse", "--show-toplevel", "--show-prefix", "--path-format=absolute", "--git-common-dir"]).catch(() => undefined);
  if (!top || top.code !== 0) {
    throw refuse(name, `workspace "worktree" needs a git repository, and ${cwd} is not in one`, "run it from inside a repository (or give the stage a cwd in one), or make one there with: git init");
  }
  const [repo, prefix, gitDir] = top.stdout.split("\n") as [string, string, string];
  const branch = opt.branch ?? `atomic/${runId}/${position}-${slug(name)}`;
  if ((await git(repo, ["check-ref-format", "--branch", branch])).code !== 0) {
    throw refuse(name, `${JSON.stringify(branch)} is not a valid branch name`, "name it like try/first-idea (no spaces, no '..', no ending '.lock')");
  }
  const path = join(gitDir, "atomic-worktrees", runId, `${position}-${slug(name)}`);
  const record = (baseCommit: string, base: string): WorkspaceRecord => ({ repo, gitDir, path, cwd: join(path, prefix), branch, base, baseCommit });
  const baseRef = BASE_REF_PREFIX + branch;
  const recordedBase = (await git(repo, ["rev-parse", "--verify", "-q", baseRef])).stdout.trim();

  // A resumed attempt: the worktree is there, on its branch.
  if (existsSync(join(path, ".git"))) {
    const head = (await git(path, ["symbolic-ref", "-q", "--short", "HEAD"])).stdout.trim();
    if (head === branch && recordedBase) return record(recordedBase, opt.base ?? recordedBase);
  }
  const branchExists = (await git(repo, ["rev-parse", "--verify", "-q", `refs/heads/${branch}`])).code === 0;
  if (branchExists) {
    if (!recordedBase) throw refuse(name, `branch ${branch} already exists in ${repo}`, "name another branch (workspace: { worktree: { branch } }) or delete that one: git branch -D " + branch);
    // An earlier stage's worktree of this branch, still there: the stage goes on in it (a follow-up turn, the next turn of a loop).
    const earlier = await atomicWorktreeOf(repo, gitDir, branch);
    if (earlier) return { ...record(recordedBase, opt.base ?? recordedBase), path: earlier, cwd: join(earlier, prefix) };
    await addWorktree(name, repo, path, ["worktree", "add", "--quiet", path, branch], undefined);
    return record(recordedBase, opt.base ?? recordedBase);
  }

  let baseCommit: string;
  if (opt.base !== undefined) {
    const resolved = await git(repo, ["rev-parse", "--verify", "-q", `${opt.base}^{commit}`]);
    if (resolved.code !== 0) throw refuse(name, `base ${JSON.stringify(opt.base)} is not a commit of ${repo}`, "name a branch, tag or commit that exists (git branch -a lists the branches)");
    baseCommit = resolved.stdout.trim();
  } else {
    const head = await git(cwd, ["rev-parse", "--verify", "-q", "HEAD^{commit}"]);
    if (head.code !== 0) throw refuse(name, `the repository ${repo} has no commit yet, so a worktree has nothing to start from`, "commit something first: git add -A && git commit -m start");
    baseCommit = head.stdout.trim();
    const left = await uncommitted(cwd);
    if (left.length > 0) {
      const shown = left.slice(0, 5).join(", ") + (left.length > 5 ? ` and ${left.length - 5} more` : "");
      throw refuse(name, `the checkout ${repo} has uncommitted changes that the worktree would leave out: ${shown}`, "commit or stash them first, or name the base to start from: workspace: { worktree: { base: \"HEAD\" } }");
    }
  }
  await gitOk(repo, ["update-ref", baseRef, baseCommit]);
  // The branch first, then its worktree: a `worktree add` that makes no branch may be run again when it meets
  // another stage's worktree half made (src/shared/git.ts). A crash between the two resumes as "branch exists".
  await gitOk(repo, ["branch", branch, baseCommit]);
  await addWorktree(name, repo, path, ["worktree", "add", "--quiet", path, branch], { ref: baseRef, branch });
  return record(baseCommit, opt.base ?? baseCommit);
}

/** The directory of one of atomic's worktrees (under `<git dir>/atomic-worktrees/`) that has `branch` checked out, if any. */
async function atomicWorktreeOf(repo: string, gitDir: string, branch: string): Promise<string | undefined> {
  const list = await gitOk(repo, ["worktree", "list", "--porcelain", "-z"]);
  const mine = join(gitDir, "atomic-worktrees") + "/";
  let dir: string | undefined;
  for (const field of list.split("\0")) {
    if (field.startsWith("worktree ")) dir = field.slice("worktree ".length);
    else if (field === `branch refs/heads/${branch}` && dir?.startsWith(mine) && existsSync(dir)) return dir;
  }
  return undefined;
}

/** Adds the worktree; when git refuses, takes back what this stage just made (`made`: its base ref and branch). */
async function addWorktree(name: string, repo: string, path: string, args: string[], made: { ref: string; branch: string } | undefined): Promise<void> {
  const out = await git(repo, args);
  if (out.code === 0) return;
  if (made) {
    await git(repo, ["branch", "-D", made.branch]);
    await git(repo, ["update-ref", "-d", made.ref]);
  }
  await git(repo, ["worktree", "prune"]);
  throw refuse(name, `git could not make its worktree: ${lastWords(out)}`, `see git worktree list in ${repo}`);
}

/** The checkout's uncommitted paths (untracked too, not ignored ones), but atomic's own `.atomic/` directory. */
async function uncommitted(cwd: string): Promise<string[]> {
  const out = await gitOk(cwd, ["status", "--porcelain", "-z", "--untracked-files=normal"]);
  const paths: string[] = [];
  const entries = out.split("\0");
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    if (e.length < 4) continue;
    if (e[0] === "R" || e[0] === "C") i++; // a rename's source follows
    const path = e.slice(3);
    if (path === ".atomic/" || path.startsWith(".atomic/")) continue;
    paths.push(path);
  }
  return paths;
}

/** After the stage: commits what it left uncommitted, then says what it changed (the whole diff written to `diffPath`). */
export async function settleWorkspace(ws: WorkspaceRecord, stageName: string, diffPath: string): Promise<StageWorkspace> {
  const autoSha = await commitLeftovers(ws.path, `atomic: what stage ${stageName} left uncommitted`);
  return { stage: stageName, ...(await describeWorkspace(ws, diffPath, autoSha)) };
}

/**
 * What a stage left uncommitted in the worktree `path` (untracked files too, not ignored ones), committed by
 * atomic with `message` (the user's identity if configured, no hooks); the commit, or undefined when nothing
 * was left. Throws GitError when git refuses.
 */
export async function commitLeftovers(path: string, message: string): Promise<string | undefined> {
  await gitOk(path, ["add", "-A"]);
  if ((await git(path, ["diff", "--cached", "--quiet"])).code !== 1) return undefined;
  await gitOk(path, [...(await identity(path)), "commit", "--quiet", "--no-verify", "-m", message]);
  return (await gitOk(path, ["rev-parse", "HEAD"])).trim();
}

/** The commits, files and diff of a worktree's branch since its base (read where the branch is: the repository). */
export async function describeWorkspace(ws: Pick<WorkspaceRecord, "repo" | "path" | "branch" | "base" | "baseCommit">, diffPath: string, autoSha?: string): Promise<Omit<StageWorkspace, "stage">> {
  const head = (await gitOk(ws.repo, ["rev-parse", `refs/heads/${ws.branch}`])).trim();
  const log = await gitOk(ws.repo, ["log", "--reverse", "--format=%H%x09%s", `${ws.baseCommit}..${head}`]);
  const commits = log
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => {
      const [sha, ...subject] = l.split("\t");
      return { sha: sha!, subject: subject.join("\t"), ...(sha === autoSha ? { auto: true } : {}) };
    });
  const files = (await gitOk(ws.repo, ["diff", "--name-status", "-z", "--no-renames", ws.baseCommit, head]))
    .split("\0")
    .filter((x) => x !== "")
    .reduce<{ path: string; status: string }[]>((acc, x, i, all) => (i % 2 === 0 ? [...acc, { status: x, path: all[i + 1]! }] : acc), []);
  const diff = await gitOk(ws.repo, ["diff", "--no-color", "--no-ext-diff", ws.baseCommit, head]);
  writeFileSync(diffPath, diff);
  const truncated = Buffer.byteLength(diff) > DIFF_CAP;
  return {
    repo: ws.repo,
    path: ws.path,
    branch: ws.branch,
    base: ws.base,
    baseCommit: ws.baseCommit,
    head,
    commits,
    files,
    diff: truncated ? Buffer.from(diff).subarray(0, DIFF_CAP).toString("utf8") : diff,
    ...(truncated ? { diffTruncated: true } : {}),
    diffPath,
  };
}

/** What the stage's start record says of its worktree (`atomic diff` reads it). */
export function workspaceEntry(ws: WorkspaceRecord): Omit<WorkspaceRecord, "gitDir"> {
  const { gitDir: _gitDir, ...entry } = ws;
  return entry;
}

/** The file, in the run's artifact directory, listing its worktrees for `atomic gc` (one JSON line each). */
export function worktreeListPath(artifactsDir: string, runId: string): string {
  return join(artifactsDir, runId, "worktrees.jsonl");
}

/** Adds the worktree to its run's list for gc (once). */
export function rememberWorkspace(artifactsDir: string, runId: string, ws: WorkspaceRecord): void {
  const file = worktreeListPath(artifactsDir, runId);
  const line = JSON.stringify({ repo: ws.repo, path: ws.path, branch: ws.branch });
  const known = existsSync(file) ? readFileSync(file, "utf8").split("\n") : [];
  if (known.includes(line)) return;
  mkdirSync(dirname(file), { recursive: true });
  appendFileSync(file, `${line}\n`);
}

/** gc: removes the worktrees a deleted run made (`branches`: their branches and base refs too); what went, by path. */
export async function removeRunWorktrees(artifactsDir: string, runId: string, opts: { branches: boolean; dryRun: boolean }): Promise<{ worktrees: string[]; branches: string[] }> {
  const file = worktreeListPath(artifactsDir, runId);
  const out = { worktrees: [] as string[], branches: [] as string[] };
  if (!existsSync(file)) return out;
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line.trim()) continue;
    const { repo, path, branch } = JSON.parse(line) as { repo: string; path: string; branch: string };
    if (!existsSync(repo)) continue;
    if (existsSync(path)) {
      out.worktrees.push(path);
      if (!opts.dryRun) {
        await git(repo, ["worktree", "remove", "--force", "--force", path]);
        rmSync(path, { recursive: true, force: true });
      }
    }
    if (opts.branches && (await git(repo, ["rev-parse", "--verify", "-q", `refs/heads/${branch}`])).code === 0) {
      out.branches.push(branch);
      if (!opts.dryRun) {
        await git(repo, ["branch", "-D", "--quiet", branch]);
        await git(repo, ["update-ref", "-d", BASE_REF_PREFIX + branch]);
      }
    }
    if (!opts.dryRun) await git(repo, ["worktree", "prune"]);
  }
  return out;
}
