/**
 * Merging stage branches into a target branch without touching any
 * checkout (ctx.merge; docs/design/worktrees.md#merging).
 *
 * The target must be a branch that no worktree has checked out (the user's
 * checkout included): moving it under a checkout would leave that
 * checkout's files behind its branch. The merge happens in a temporary
 * detached worktree at the target's commit, one branch after another
 * (`merge`: a merge commit each, `--no-ff`; `squash`: one commit each);
 * only when every branch merged is the target moved to the result, with a
 * compare-and-swap on its old commit. A conflict stops there: the files and
 * their hunks (the conflict markers) are the result, the temporary worktree
 * is removed and the target has not moved: nothing is half-merged.
 *
 * Every commit made carries `Atomic-Merge: <key>` (the step's idempotency
 * key), so a merge run again after a crash between the target's move and
 * the step's checkpoint sees that it happened and does not merge twice.
 */

import { rmSync } from "node:fs";
import { join } from "node:path";
import type { MergeResult } from "../sdk/types.ts";
import { StepFailedError } from "../shared/errors.ts";
import { git, gitOk, identity } from "../shared/git.ts";

export interface MergeRequest {
  step: string;
  repo: string;
  into: string;
  branches: string[];
  strategy: "merge" | "squash";
  key: string;
}

function refuse(step: string, message: string, hint: string): StepFailedError {
  return new StepFailedError(step, `ctx.merge: ${message}`, { code: "bad_merge", hint });
}

/** The worktree that has `branch` checked out, if any. */
export async function checkedOutAt(repo: string, branch: string): Promise<string | undefined> {
  const list = await gitOk(repo, ["worktree", "list", "--porcelain"]);
  let path: string | undefined;
  for (const line of list.split("\n")) {
    if (line.startsWith("worktree ")) path = line.slice("worktree ".length);
    else if (line === `branch refs/heads/${branch}`) return path;
  }
  return undefined;
}

export async function mergeBranches(req: MergeRequest): Promise<MergeResult> {
  const { step, repo, into } = req;
  const intoRef = `refs/heads/${into}`;
  const old = await git(repo, ["rev-parse", "--verify", "-q", intoRef]);
  if (old.code !== 0) throw refuse(step, `branch ${into} does not exist in ${repo}`, `make it first, e.g. from main: git -C ${repo} branch ${into} main`);
  const oldHead = old.stdout.trim();
  const heads: string[] = [];
  for (const b of req.branches) {
    const r = await git(repo, ["rev-parse", "--verify", "-q", `refs/heads/${b}`]);
    if (r.code !== 0) throw refuse(step, `branch ${b} does not exist in ${repo}`, "merge the results of stages run with workspace: \"worktree\", or branches that exist");
    heads.push(r.stdout.trim());
  }
  // Merged already (run again after a crash past the target's move): said as it was.
  const done = (await git(repo, ["log", "-1", "--format=%H", `--grep=^Atomic-Merge: ${req.key}$`, intoRef])).stdout.trim();
  if (done) return { ok: true, into, head: oldHead, merged: req.branches.map((branch, i) => ({ branch, commit: heads[i]! })) };
  const at = await checkedOutAt(repo, into);
  if (at !== undefined) {
    throw refuse(step, `branch ${into} is checked out in ${at}, and merging into it would leave that checkout's files behind its branch`, `merge into a branch of its own (git -C ${repo} branch integrate ${into}) and bring that in yourself, or check out another branch in ${at}`);
  }

  const common = (await gitOk(repo, ["rev-parse", "--path-format=absolute", "--git-common-dir"])).trim();
  const tmp = join(common, "atomic-worktrees", `merge-${process.pid}-${Date.now().toString(36)}`);
  await gitOk(repo, ["worktree", "add", "--quiet", "--detach", tmp, oldHead]);
  try {
    const who = await identity(repo);
    const merged: { branch: string; commit: string }[] = [];
    for (const [i, branch] of req.branches.entries()) {
      const message = `atomic: merge ${branch} into ${into}\n\nAtomic-Merge: ${req.key}`;
      // By name: the conflict markers then say which branch a side is (its commit was checked above).
      const args = req.strategy === "squash" ? ["merge", "--squash", "--quiet", branch] : ["merge", "--no-ff", "--quiet", "-m", message, branch];
      const r = await git(tmp, [...who, ...args]);
      if (r.code !== 0) {
        const files = (await git(tmp, ["diff", "--name-only", "--diff-filter=U"])).stdout.split("\n").filter((f) => f !== "");
        if (files.length === 0) throw new StepFailedError(step, `ctx.merge: git could not merge ${branch} into ${into}: ${r.stderr.trim() || r.stdout.trim()}`, { code: "merge_failed" });
        const conflicts = [];
        for (const path of files) conflicts.push({ path, hunks: (await git(tmp, ["diff", "--no-color", "--", path])).stdout });
        return { ok: false, into, head: oldHead, merged: [], conflict: { branch, commit: heads[i]!, files: conflicts } };
      }
      if (req.strategy === "squash" && (await git(tmp, ["diff", "--cached", "--quiet"])).code === 1) {
        await gitOk(tmp, [...who, "commit", "--quiet", "--no-verify", "-m", message]);
      }
      merged.push({ branch, commit: heads[i]! });
    }
    const head = (await gitOk(tmp, ["rev-parse", "HEAD"])).trim();
    if (head !== oldHead) {
      const moved = await git(repo, ["update-ref", "-m", `atomic: merge into ${into}`, intoRef, head, oldHead]);
      if (moved.code !== 0) throw new StepFailedError(step, `ctx.merge: branch ${into} moved while the merge was made, so it was not changed`, { code: "merge_failed", hint: "resume the run to merge again" });
    }
    return { ok: true, into, head, merged };
  } finally {
    await git(repo, ["worktree", "remove", "--force", "--force", tmp]);
    rmSync(tmp, { recursive: true, force: true });
    await git(repo, ["worktree", "prune"]);
  }
}
