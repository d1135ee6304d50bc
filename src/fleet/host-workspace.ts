/**
 * A worktree stage on a worker host (`atomic worker --repo DIR`;
 * docs/design/worktrees.md, "On a worker host").
 *
 * The root opened the stage's worktree in its own repository and named the
 * repository in the request (`workspace`: its shared remote's URL, the base
 * commit, the branch, the cwd's subdirectory). A host given a checkout of
 * that repository opens the same branch at the same base there, with the
 * root's rules (engine/stage-workspace.ts): found again by a resumed
 * attempt, refused in one sentence when the checkout has no remote of that
 * URL or no way to get the base commit. When the shared remote already
 * has the branch (an earlier attempt of the stage ran on another host, or
 * on this one before its worktree went, and pushed), the stage goes on from
 * there: the branch is fetched and the checkout's branch made or
 * fast-forwarded to it first. After the stage, what it left uncommitted is
 * committed and the branch is pushed to the shared remote; the result names
 * the pushed head (`pushed`), and the root fetches it into its own worktree.
 * A cancelled stage's work goes the same way (its commit says it was
 * cancelled), so it outlives the worktree the host's sweep removes.
 */

import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import type { StageRequest } from "../runners/types.ts";
import { BASE_REF_PREFIX, commitLeftovers, openWorkspace, type WorkspaceRecord } from "../engine/stage-workspace.ts";
import { clearDeadLocks, lockWarnings } from "../engine/worktree-locks.ts";
import { git, gitOk, lastWords } from "../shared/git.ts";
import { inTurn } from "./checkout-turns.ts";

type Asked = NonNullable<StageRequest["workspace"]>;

/** A remote's URL compared loosely: no trailing slash or `.git`. */
function sameUrl(a: string, b: string): boolean {
  const norm = (u: string) => u.trim().replace(/\/+$/, "").replace(/\.git$/, "");
  return norm(a) === norm(b);
}

/** The name of the checkout's remote whose URL is `url`, if any. */
async function remoteNamed(repo: string, url: string): Promise<string | undefined> {
  const names = (await git(repo, ["remote"])).stdout.split("\n").filter((n) => n !== "");
  for (const name of names) {
    if (sameUrl((await git(repo, ["remote", "get-url", name])).stdout, url)) return name;
  }
  return undefined;
}

export interface HostWorkspace {
  ws: WorkspaceRecord;
  /** The remote (in the host's checkout) the branch is pushed to, and its URL as the root named it. */
  remote: string;
  url: string;
  /** The stage's name (atomic's commit of what it left names it). */
  stage: string;
  /** What opening it found to say (dead locks removed, or held by a live git), for the stage's result. */
  warnings: string[];
}

/**
 * Opens (or finds again) the stage's worktree in the host's checkout `repo`; a string is the one-sentence refusal.
 * In its turn on the checkout (checkout-turns.ts): no sweep or other opening runs git there meanwhile.
 */
export function openHostWorkspace(repo: string, hostId: string, request: StageRequest & { workspace: Asked }): Promise<HostWorkspace | string> {
  return inTurn(repo, () => openInTurn(repo, hostId, request));
}

async function openInTurn(repo: string, hostId: string, request: StageRequest & { workspace: Asked }): Promise<HostWorkspace | string> {
  const asked = request.workspace;
  const stage = `stage "${request.stageName}"`;
  const remote = await remoteNamed(repo, asked.remote.url);
  if (remote === undefined) {
    return `${stage}: host ${hostId}'s checkout ${repo} has no remote ${asked.remote.url}, the run's repository (add it there with: git -C ${repo} remote add origin ${asked.remote.url})`;
  }
  // A killed git of this host's (committing, fetching or pushing for this stage) left its locks: gone before the fetch.
  const gitDir = resolve(repo, (await gitOk(repo, ["rev-parse", "--git-common-dir"])).trim());
  const found = clearDeadLocks({ repo, gitDir, path: await worktreeWith(repo, asked.branch), branch: asked.branch, remote });
  const warnings = lockWarnings(`"${request.stageName}" on host ${hostId}`, found);
  const hasBase = async () => (await git(repo, ["cat-file", "-e", `${asked.baseCommit}^{commit}`])).code === 0;
  if (!(await hasBase())) {
    const fetched = await git(repo, ["fetch", "--quiet", "--no-tags", remote]);
    if (fetched.code !== 0 || !(await hasBase())) {
      return `${stage}: its base commit ${asked.baseCommit.slice(0, 12)} is not in host ${hostId}'s checkout ${repo} nor on its remote ${asked.remote.url}${fetched.code !== 0 ? ` (${lastWords(fetched)})` : ""} (push it from the run's repository first: git push ${asked.remote.name} HEAD)`;
    }
  }
  const taken = await takeRemoteBranch(repo, remote, asked.branch, asked.baseCommit).catch((err: unknown) => (err instanceof Error ? err.message : String(err)));
  if (taken !== undefined) return `${stage}: its branch ${asked.branch} on ${asked.remote.url} could not be taken into host ${hostId}'s checkout ${repo}: ${taken}`;
  try {
    const ws = await openWorkspace(request.stageName, request.stageKey, request.runId, { worktree: { base: asked.baseCommit, branch: asked.branch } }, repo);
    return { ws: { ...ws, cwd: join(ws.path, asked.prefix) }, remote, url: asked.remote.url, stage: request.stageName, warnings };
  } catch (err) {
    return `${err instanceof Error ? err.message : String(err)} (on host ${hostId}, in its checkout ${repo})`;
  }
}

/**
 * The branch as the shared remote has it, taken into the checkout: made there (with its base ref, so
 * openWorkspace finds it as the stage's own) when missing, fast-forwarded when behind (in the worktree that
 * has it checked out, if any). A checkout ahead of the remote (this host's own unpushed commits) is left as it
 * is; one that diverged is too, as is a remote branch not grown from the base (another branch of that name):
 * their push then fails the attempt. Undefined when done (or nothing to do); else git's words.
 */
async function takeRemoteBranch(repo: string, remote: string, branch: string, baseCommit: string): Promise<string | undefined> {
  const listed = await git(repo, ["ls-remote", "--heads", remote, `refs/heads/${branch}`]);
  // Not reachable now: the stage starts from what this checkout has, and its push says what went wrong.
  if (listed.code !== 0) return undefined;
  const remoteHead = listed.stdout.split(/\s/)[0] ?? "";
  if (remoteHead === "") return undefined;
  const local = (await git(repo, ["rev-parse", "--verify", "-q", `refs/heads/${branch}`])).stdout.trim();
  if (local === remoteHead) return undefined;
  if ((await git(repo, ["cat-file", "-e", `${remoteHead}^{commit}`])).code !== 0) {
    const fetched = await git(repo, ["fetch", "--quiet", "--no-tags", remote, `refs/heads/${branch}`]);
    if (fetched.code !== 0) return lastWords(fetched);
    if ((await git(repo, ["cat-file", "-e", `${remoteHead}^{commit}`])).code !== 0) return `the fetch did not bring ${remoteHead.slice(0, 12)}`;
  }
  // Not grown from the stage's base: some other branch of that name (its push then says so).
  if ((await git(repo, ["merge-base", "--is-ancestor", baseCommit, remoteHead])).code !== 0) return undefined;
  if (local === "") {
    // The base ref first, as openWorkspace does: a branch with it is atomic's.
    await gitOk(repo, ["update-ref", BASE_REF_PREFIX + branch, baseCommit]);
    await gitOk(repo, ["update-ref", `refs/heads/${branch}`, remoteHead, ""]);
    return undefined;
  }
  if ((await git(repo, ["merge-base", "--is-ancestor", local, remoteHead])).code !== 0) return undefined;
  const checkedOut = await worktreeWith(repo, branch);
  const moved = checkedOut ? await git(checkedOut, ["merge", "--ff-only", "--quiet", remoteHead]) : await git(repo, ["update-ref", `refs/heads/${branch}`, remoteHead, local]);
  return moved.code === 0 ? undefined : lastWords(moved);
}

/** The worktree of the checkout that has `branch` checked out, if any. */
async function worktreeWith(repo: string, branch: string): Promise<string | undefined> {
  let dir: string | undefined;
  for (const field of (await gitOk(repo, ["worktree", "list", "--porcelain", "-z"])).split("\0")) {
    if (field.startsWith("worktree ")) dir = field.slice("worktree ".length);
    else if (field === `branch refs/heads/${branch}` && dir !== undefined && existsSync(dir)) return dir;
  }
  return undefined;
}

/**
 * After the stage (`cancelled`: it was stopped, so its work is kept on the remote, not lost with the worktree):
 * its leftovers committed, the branch pushed; what the result says was pushed. Throws GitError when git refuses.
 */
export async function pushHostWorkspace(hw: HostWorkspace, cancelled = false): Promise<{ url: string; branch: string; head: string }> {
  const { ws } = hw;
  await commitLeftovers(ws.path, `atomic: what stage ${hw.stage} left uncommitted${cancelled ? " when it was cancelled" : ""}`);
  const head = (await gitOk(ws.path, ["rev-parse", "HEAD"])).trim();
  await gitOk(ws.path, ["push", "--quiet", hw.remote, `${head}:refs/heads/${ws.branch}`]);
  return { url: hw.url, branch: ws.branch, head };
}
