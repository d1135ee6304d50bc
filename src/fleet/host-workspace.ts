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
 * URL or no way to get the base commit. After the stage, what it left
 * uncommitted is committed and the branch is pushed to the shared remote;
 * the result names the pushed head (`pushed`), and the root fetches it into
 * its own worktree before it settles the stage.
 */

import { join } from "node:path";
import type { StageRequest } from "../runners/types.ts";
import { openWorkspace, type WorkspaceRecord } from "../engine/stage-workspace.ts";
import { git, gitOk, identity, lastWords } from "../shared/git.ts";

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
}

/** Opens (or finds again) the stage's worktree in the host's checkout `repo`; a string is the one-sentence refusal. */
export async function openHostWorkspace(repo: string, hostId: string, request: StageRequest & { workspace: Asked }): Promise<HostWorkspace | string> {
  const asked = request.workspace;
  const stage = `stage "${request.stageName}"`;
  const remote = await remoteNamed(repo, asked.remote.url);
  if (remote === undefined) {
    return `${stage}: host ${hostId}'s checkout ${repo} has no remote ${asked.remote.url}, the run's repository (add it there with: git -C ${repo} remote add origin ${asked.remote.url})`;
  }
  const hasBase = async () => (await git(repo, ["cat-file", "-e", `${asked.baseCommit}^{commit}`])).code === 0;
  if (!(await hasBase())) {
    const fetched = await git(repo, ["fetch", "--quiet", "--no-tags", remote]);
    if (fetched.code !== 0 || !(await hasBase())) {
      return `${stage}: its base commit ${asked.baseCommit.slice(0, 12)} is not in host ${hostId}'s checkout ${repo} nor on its remote ${asked.remote.url}${fetched.code !== 0 ? ` (${lastWords(fetched)})` : ""} (push it from the run's repository first: git push ${asked.remote.name} HEAD)`;
    }
  }
  try {
    const ws = await openWorkspace(request.stageName, request.stageKey, request.runId, { worktree: { base: asked.baseCommit, branch: asked.branch } }, repo);
    return { ws: { ...ws, cwd: join(ws.path, asked.prefix) }, remote, url: asked.remote.url };
  } catch (err) {
    return `${err instanceof Error ? err.message : String(err)} (on host ${hostId}, in its checkout ${repo})`;
  }
}

/** After the stage: its leftovers committed, the branch pushed; what the result says was pushed. Throws GitError when git refuses. */
export async function pushHostWorkspace(hw: HostWorkspace, stageName: string): Promise<{ url: string; branch: string; head: string }> {
  const { ws } = hw;
  await gitOk(ws.path, ["add", "-A"]);
  if ((await git(ws.path, ["diff", "--cached", "--quiet"])).code === 1) {
    await gitOk(ws.path, [...(await identity(ws.path)), "commit", "--quiet", "--no-verify", "-m", `atomic: what stage ${stageName} left uncommitted`]);
  }
  const head = (await gitOk(ws.path, ["rev-parse", "HEAD"])).trim();
  await gitOk(ws.path, ["push", "--quiet", hw.remote, `${head}:refs/heads/${ws.branch}`]);
  return { url: hw.url, branch: ws.branch, head };
}
