/**
 * A worker host's own cleanup of the worktrees it made in its checkout
 * (`atomic worker --repo DIR`; docs/design/worktrees.md, "On a worker
 * host"). The root's `atomic gc` removes the worktrees of the root's
 * repository only; a host's checkout would otherwise keep one worktree (and
 * branch) per stage it ever ran.
 *
 * The host's worktrees are `<git dir>/atomic-worktrees/<run id>/<stage>`.
 * Those of a run that has ended (completed, failed, cancelled, skipped) or
 * that is no longer in the journal (gc) go: the worktree removed, then its
 * branch and base ref when the shared remote has the branch's commits (the
 * remote-tracking ref the push left contains them), so nothing that exists
 * only here is lost. A failed run resumed later gets its worktree back from
 * the remote (host-workspace.ts takes the pushed branch). A worktree a stage
 * of this host is using now (a later run working on the same branch) stays.
 */

import { existsSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { BASE_REF_PREFIX } from "../engine/stage-workspace.ts";
import { git, gitOk } from "../shared/git.ts";

export interface SweptWorktrees {
  worktrees: string[];
  branches: string[];
}

/**
 * Removes the worktrees of ended runs from the checkout `repo`. `ended(runId)` says whether a run has ended
 * (or is gone); `inUse(path)` whether a stage running here works in that directory.
 */
export async function sweepHostWorktrees(repo: string, ended: (runId: string) => Promise<boolean>, inUse: (path: string) => boolean): Promise<SweptWorktrees> {
  const swept: SweptWorktrees = { worktrees: [], branches: [] };
  const gitDir = (await gitOk(repo, ["rev-parse", "--path-format=absolute", "--git-common-dir"])).trim();
  const top = join(gitDir, "atomic-worktrees");
  if (!existsSync(top)) return swept;
  const branchOf = await checkedOutBranches(repo);
  for (const runId of readdirSync(top)) {
    const runDir = join(top, runId);
    const stages = readdirSync(runDir).map((name) => join(runDir, name));
    if (stages.some(inUse) || !(await ended(runId))) continue;
    for (const path of stages) {
      await git(repo, ["worktree", "remove", "--force", "--force", path]);
      rmSync(path, { recursive: true, force: true });
      swept.worktrees.push(path);
      const branch = branchOf.get(path);
      if (branch !== undefined && (await dropIfPushed(repo, branch))) swept.branches.push(branch);
    }
    rmSync(runDir, { recursive: true, force: true });
  }
  if (swept.worktrees.length > 0) await git(repo, ["worktree", "prune"]);
  return swept;
}

/** Each worktree's checked-out branch, by its directory. */
async function checkedOutBranches(repo: string): Promise<Map<string, string>> {
  const map = new Map<string, string>();
  let dir: string | undefined;
  for (const field of (await gitOk(repo, ["worktree", "list", "--porcelain", "-z"])).split("\0")) {
    if (field.startsWith("worktree ")) dir = field.slice("worktree ".length);
    else if (field.startsWith("branch refs/heads/") && dir !== undefined) map.set(dir, field.slice("branch refs/heads/".length));
  }
  return map;
}

/** Deletes an atomic branch (one with a base ref) of the checkout, its base ref and its remote-tracking refs, when a remote has its head. */
async function dropIfPushed(repo: string, branch: string): Promise<boolean> {
  const head = (await git(repo, ["rev-parse", "--verify", "-q", `refs/heads/${branch}`])).stdout.trim();
  if (head === "" || (await git(repo, ["rev-parse", "--verify", "-q", BASE_REF_PREFIX + branch])).code !== 0) return false;
  const tracking = (await gitOk(repo, ["for-each-ref", "--format=%(refname)", "refs/remotes/"])).split("\n").filter((ref) => ref.endsWith(`/${branch}`) && ref.split("/").length === 3 + branch.split("/").length);
  let pushed = false;
  for (const ref of tracking) if ((await git(repo, ["merge-base", "--is-ancestor", head, ref])).code === 0) pushed = true;
  if (!pushed) return false;
  await gitOk(repo, ["update-ref", "-d", `refs/heads/${branch}`, head]);
  await git(repo, ["update-ref", "-d", BASE_REF_PREFIX + branch]);
  for (const ref of tracking) await git(repo, ["update-ref", "-d", ref]);
  return true;
}
