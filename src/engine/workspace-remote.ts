/**
 * The root's side of a stage worktree shared with worker hosts through the
 * repository's shared remote (docs/design/worktrees.md, "On a worker
 * host"; the host's side is fleet/host-workspace.ts).
 *
 * - `workspaceIdentity`: the repository as another machine names it (the
 *   shared remote, the base commit, the branch, the cwd's subdirectory),
 *   sent with every attempt's request.
 * - `takePushed`: an attempt that ran on a host pushed the branch; its
 *   commits come into the root's worktree (a fetch, then a fast-forward).
 * - `shareWorkspace`: before an attempt a host may take, what the root's
 *   worktree holds that the remote does not (commits of attempts on the
 *   root's own workers, what they left uncommitted, the commits of an
 *   earlier stage on the same branch) is committed and pushed, so the host
 *   goes on from it; a remote that is ahead (a host pushed after the root
 *   last took) is taken instead.
 */

import { relative } from "node:path";
import { git, gitOk, lastWords } from "../shared/git.ts";
import { commitLeftovers, type WorkspaceRecord } from "./stage-workspace.ts";

export type WorkspaceIdentity = { remote: { name: string; url: string }; baseCommit: string; branch: string; prefix: string };

/**
 * What a worker host needs to open the stage's worktree in its own checkout (fleet/host-workspace.ts): the
 * repository's shared remote (`origin`, else the first one), the base commit, the branch and the cwd's
 * subdirectory. Undefined when the repository has no remote: no other machine can share its commits.
 */
export async function workspaceIdentity(ws: WorkspaceRecord): Promise<WorkspaceIdentity | undefined> {
  const names = (await git(ws.repo, ["remote"])).stdout.split("\n").filter((n) => n !== "");
  const name = names.includes("origin") ? "origin" : names[0];
  if (name === undefined) return undefined;
  const url = (await git(ws.repo, ["remote", "get-url", name])).stdout.trim();
  if (url === "") return undefined;
  return { remote: { name, url }, baseCommit: ws.baseCommit, branch: ws.branch, prefix: relative(ws.path, ws.cwd) };
}

/**
 * A worker host ran the stage in its own worktree and pushed the branch (at `head`) to the shared remote:
 * the root's worktree takes those commits (fetched, then a fast-forward), so settling it, `atomic diff`
 * and ctx.merge read them here as if the stage had run here. Taken after every attempt that pushed (a retry
 * here goes on from them) and again when settling. Throws GitError when git refuses.
 */
export async function takePushed(ws: WorkspaceRecord, pushed: { url: string; branch: string; head: string }): Promise<void> {
  // Taken already (after the attempt that pushed it, then again when settling): nothing to fetch.
  if ((await git(ws.path, ["merge-base", "--is-ancestor", pushed.head, "HEAD"])).code === 0) return;
  await gitOk(ws.path, ["fetch", "--quiet", "--no-tags", pushed.url, `refs/heads/${pushed.branch}`]);
  await gitOk(ws.path, ["merge", "--ff-only", "--quiet", pushed.head]);
}

/**
 * Before an attempt that a worker host may take (the run's journal is shared by hosts): the root's worktree
 * and the shared remote made to agree on the branch. What an earlier attempt on the root's own workers left
 * uncommitted is committed (as a host commits what its attempt left); then, when the root's branch is ahead
 * of the remote's (or the remote has none and the branch grew from its base), it is pushed; when the remote's
 * is ahead, it is taken into the worktree. A fresh worktree (at its base, nothing left) asks the remote
 * nothing. A string is what went wrong (the attempt goes ahead: one on the root's workers needs no remote).
 */
export async function shareWorkspace(ws: WorkspaceRecord, id: WorkspaceIdentity, stageName: string): Promise<string | undefined> {
  try {
    await commitLeftovers(ws.path, `atomic: what stage ${stageName} left uncommitted before its next attempt`);
    const head = (await gitOk(ws.path, ["rev-parse", "HEAD"])).trim();
    if (head === ws.baseCommit) return undefined;
    const listed = await git(ws.path, ["ls-remote", "--heads", id.remote.name, `refs/heads/${ws.branch}`]);
    if (listed.code !== 0) return `the remote ${id.remote.url} could not be asked for it: ${lastWords(listed)}`;
    const remoteHead = listed.stdout.split(/\s/)[0] ?? "";
    if (remoteHead === head) return undefined;
    if (remoteHead !== "") {
      // The remote's may be ahead: a host pushed after the root last took its commits.
      if ((await git(ws.path, ["cat-file", "-e", `${remoteHead}^{commit}`])).code !== 0) await git(ws.path, ["fetch", "--quiet", "--no-tags", id.remote.name, `refs/heads/${ws.branch}`]);
      if ((await git(ws.path, ["merge-base", "--is-ancestor", head, remoteHead])).code === 0) {
        await gitOk(ws.path, ["merge", "--ff-only", "--quiet", remoteHead]);
        return undefined;
      }
    }
    const pushed = await git(ws.path, ["push", "--quiet", id.remote.name, `${head}:refs/heads/${ws.branch}`]);
    return pushed.code === 0 ? undefined : `the push to ${id.remote.url} was refused: ${lastWords(pushed)}`;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}
