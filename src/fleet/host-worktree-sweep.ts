/**
 * A worker host's own cleanup of the worktrees it made in its checkout
 * (`atomic worker --repo DIR`; docs/design/worktrees.md, "On a worker
 * host"). The root's `atomic gc` removes the worktrees of the root's
 * repository only; a host's checkout would otherwise keep one worktree (and
 * branch) per stage it ever ran.
 *
 * The host's worktrees are `<git dir>/atomic-worktrees/<run id>/<stage>`.
 * Ownership is explicit: the host marks each worktree it opens with its
 * journal's identity and the remote it pushes to (`atomic-owner.json` in
 * the worktree's own git directory, which goes with the worktree), so one
 * checkout shared by hosts of different journals loses nothing: a host
 * sweeps the worktrees of its journal only. Those of a run that has ended
 * (completed, failed, cancelled, skipped) or that is no longer in the
 * journal (gc) go. Nothing only this checkout has is lost: what a stage left
 * uncommitted is committed first, the branch pushed to the marked remote
 * when the remote-tracking ref does not have its head (a refused push keeps
 * the worktree, told in the host's log), then the worktree removed, then its
 * branch and base ref when the remote has its commits. A failed run resumed
 * later gets its worktree back from the remote (host-workspace.ts takes the
 * pushed branch). A worktree a stage of this host is using now (a later run
 * working on the same branch) stays. Worktrees made before marks existed are
 * taken as this journal's only while the journal still has their run.
 */

import { existsSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { BASE_REF_PREFIX, commitLeftovers } from "../engine/stage-workspace.ts";
import { git, gitOk, lastWords } from "../shared/git.ts";
import { inTurn } from "./checkout-turns.ts";

export interface SweptWorktrees {
  worktrees: string[];
  branches: string[];
  /** Worktrees kept although their run ended, each with why (a refused push, a git failure). */
  kept: string[];
}

/** Whose a worktree is: the journal whose host made it, and the remote (of the checkout) its branch goes to. */
export interface WorktreeOwner {
  journal: string;
  remote: string;
}

/** Where a run stands in the host's journal. */
export type RunState = "live" | "ended" | "gone";

const OWNER_FILE = "atomic-owner.json";

/** Marks the worktree at `path` as the journal's (in its own git directory, removed with it). */
export async function markWorktree(path: string, owner: WorktreeOwner): Promise<void> {
  writeFileSync(join(await adminDir(path), OWNER_FILE), `${JSON.stringify(owner)}\n`);
}

/** The worktree's mark, or undefined when it has none (made before marks, or not a worktree any more). */
async function ownerOf(path: string): Promise<WorktreeOwner | undefined> {
  try {
    return JSON.parse(readFileSync(join(await adminDir(path), OWNER_FILE), "utf8")) as WorktreeOwner;
  } catch {
    return undefined;
  }
}

async function adminDir(path: string): Promise<string> {
  return (await gitOk(path, ["rev-parse", "--absolute-git-dir"])).trim();
}

/**
 * Removes the worktrees of ended runs of the journal `journal` from the checkout `repo`. `runState(runId)` says
 * where a run stands in that journal; `inUse(path)` whether a stage running here works in that directory.
 */
export async function sweepHostWorktrees(repo: string, journal: string, runState: (runId: string) => Promise<RunState>, inUse: (path: string) => boolean): Promise<SweptWorktrees> {
  const swept: SweptWorktrees = { worktrees: [], branches: [], kept: [] };
  const gitDir = (await gitOk(repo, ["rev-parse", "--path-format=absolute", "--git-common-dir"])).trim();
  const top = join(gitDir, "atomic-worktrees");
  if (!existsSync(top)) return swept;
  // Each step that reads or changes what all worktrees share takes its turn on the checkout (checkout-turns.ts):
  // the host's stages open their worktrees there meanwhile. Saving an ended worktree's work touches it alone.
  const branchOf = await inTurn(repo, () => checkedOutBranches(repo));
  for (const runId of readdirSync(top)) {
    const runDir = join(top, runId);
    const stages = readdirSync(runDir).map((name) => join(runDir, name));
    if (stages.some(inUse)) continue;
    const owners = await Promise.all(stages.map(ownerOf));
    // Another journal's run (a host of another journal shares this checkout): never ours to judge.
    if (owners.some((o) => o !== undefined && o.journal !== journal)) continue;
    const state = await runState(runId);
    if (state === "live" || (state === "gone" && owners.some((o) => o === undefined))) continue;
    let left = 0;
    for (const [i, path] of stages.entries()) {
      const branch = branchOf.get(path);
      const unsaved = await saveWork(repo, path, branch, owners[i]?.remote).catch((err: unknown) => (err instanceof Error ? err.message : String(err)));
      if (unsaved !== undefined) {
        swept.kept.push(`${path} (${unsaved})`);
        left++;
        continue;
      }
      const dropped = await inTurn(repo, async () => {
        await git(repo, ["worktree", "remove", "--force", "--force", path]);
        rmSync(path, { recursive: true, force: true });
        return branch !== undefined && (await dropIfPushed(repo, branch));
      });
      swept.worktrees.push(path);
      if (dropped && branch !== undefined) swept.branches.push(branch);
    }
    if (left === 0) rmSync(runDir, { recursive: true, force: true });
  }
  if (swept.worktrees.length > 0) await inTurn(repo, () => git(repo, ["worktree", "prune"]));
  return swept;
}

/**
 * Before a worktree goes: what was left in it committed, and its branch pushed to `remote` when that remote's
 * tracking ref does not have its head. Undefined when nothing is left only here; else why it must stay.
 */
async function saveWork(repo: string, path: string, branch: string | undefined, remote: string | undefined): Promise<string | undefined> {
  if (!existsSync(path)) return undefined;
  await commitLeftovers(path, `atomic: what was left uncommitted in ${basename(path)} when its run ended`);
  if (branch === undefined || remote === undefined) return undefined; // unmarked: the branch stays here unless the remote has it
  const head = (await gitOk(repo, ["rev-parse", `refs/heads/${branch}`])).trim();
  const tracking = `refs/remotes/${remote}/${branch}`;
  if ((await git(repo, ["merge-base", "--is-ancestor", head, tracking])).code === 0) return undefined;
  const pushed = await git(path, ["push", "--quiet", remote, `${head}:refs/heads/${branch}`]);
  return pushed.code === 0 ? undefined : `its branch ${branch} could not be pushed to ${remote}: ${lastWords(pushed)}`;
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
