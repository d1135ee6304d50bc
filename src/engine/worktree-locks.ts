/**
 * Lock files a killed git left in a stage's worktree (docs/design/worktrees.md,
 * "Locks left by a killed git").
 *
 * git takes a lock by creating `<file>.lock` and renames it over the file
 * when done; a git killed in between (the root SIGKILLed while it committed
 * what an attempt left, pushed or took a host's commits) leaves the lock,
 * and every later git command that needs it refuses ("Unable to create
 * '…/index.lock': File exists"), so a resumed stage would fail every attempt.
 * The locks that concern one stage's worktree are its own: those in the
 * worktree's admin directory (`index.lock`, `HEAD.lock`, `ORIG_HEAD.lock`, …)
 * and those of its branch and base ref in the repository's git directory.
 *
 * On a worker host (fleet/host-workspace.ts) the same is done in its own
 * checkout before its fetch of the stage's branch, when the stage comes
 * back there: the host killed while its git committed, fetched or pushed
 * for the stage leaves the same locks (and its remote-tracking branch's,
 * `refs/remotes/<remote>/<branch>.lock`, written by that fetch and push).
 *
 * Before the stage's attempts, each such lock is looked at: when a live
 * process named git* works in the worktree, or in the repository outside
 * atomic's other worktrees (the places a git that could hold one of these
 * locks runs), the locks stay (it may be writing; it renames or removes the
 * lock when it ends) and the caller warns naming its pid; otherwise each
 * lock is removed and the caller warns naming it. git writes the new file
 * in the lock and renames it last, so the file a dead lock stood for is
 * whole: the one before the killed command. Where there is no /proc to ask,
 * the locks stay too.
 */

import { existsSync, readFileSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { join, resolve, sep } from "node:path";
import { BASE_REF_PREFIX, type WorkspaceRecord } from "./stage-workspace.ts";

export interface WorktreeLocks {
  /** Locks removed: no git was alive to hold them. */
  removed: string[];
  /** Locks left in place, and the live git that may hold them (none named: this system has no /proc to ask). */
  held?: { locks: string[]; pid?: number };
}

/**
 * Where a stage's locks are: its repository, the worktree (none yet on a host that has not opened it) and its
 * branch; a host also names the remote its fetch and push update a remote-tracking branch of.
 */
export type LockPlace = Pick<WorkspaceRecord, "repo" | "gitDir" | "branch"> & { path: string | undefined; remote?: string };

/** Looks at the worktree's locks (see the header); removes those no live git can hold. */
export function clearDeadLocks(ws: LockPlace): WorktreeLocks {
  const locks = lockFiles(ws);
  if (locks.length === 0) return { removed: [] };
  // Without /proc no process can be asked about: the locks stay, as git itself would leave them.
  if (!existsSync("/proc/self")) return { removed: [], held: { locks } };
  const pid = liveGitIn(ws);
  if (pid !== undefined) return { removed: [], held: { locks, pid } };
  for (const lock of locks) rmSync(lock, { force: true });
  return { removed: locks };
}

/** The warnings a stage's start gives for what `clearDeadLocks` found. */
export function lockWarnings(stage: string, found: WorktreeLocks): string[] {
  const out = found.removed.map((lock) => `stage ${stage}: removed ${lock}, a lock a killed git left in its worktree (no git process was running there)`);
  const held = found.held;
  if (held) {
    const who = held.pid !== undefined ? `git (pid ${held.pid}) is still running in its repository` : "atomic cannot tell here whether a git still holds them";
    out.push(`stage ${stage}: ${who}, so ${held.locks.join(", ")} stay${held.locks.length > 1 ? "" : "s"} in place; git commands of this attempt fail while ${held.locks.length > 1 ? "they exist" : "it exists"} (when no git is running there, remove ${held.locks.length > 1 ? "them" : "it"} and resume)`);
  }
  return out;
}

/** The lock files present that concern the worktree: its admin directory's, its branch's and its base ref's (and its remote-tracking branch's). */
function lockFiles(ws: LockPlace): string[] {
  const found: string[] = [];
  const admin = ws.path === undefined ? undefined : adminDir(ws.path);
  if (admin !== undefined) {
    for (const name of safeList(admin)) if (name.endsWith(".lock")) found.push(join(admin, name));
  }
  for (const ref of [`refs/heads/${ws.branch}`, BASE_REF_PREFIX + ws.branch, ...(ws.remote ? [`refs/remotes/${ws.remote}/${ws.branch}`] : [])]) {
    const lock = join(ws.gitDir, `${ref}.lock`);
    if (existsSync(lock)) found.push(lock);
  }
  return found;
}

/** The worktree's admin directory (`<git dir>/worktrees/<id>`), from its `.git` file ("gitdir: …"). */
function adminDir(path: string): string | undefined {
  try {
    const line = readFileSync(join(path, ".git"), "utf8").trim();
    return line.startsWith("gitdir: ") ? resolve(path, line.slice("gitdir: ".length)) : undefined;
  } catch {
    return undefined;
  }
}

function safeList(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** A live process named git* whose working directory is where a git holding one of these locks would run (see the header). */
function liveGitIn(ws: LockPlace): number | undefined {
  const inside = (dir: string, top: string) => dir === top || dir.startsWith(top + sep);
  const others = join(ws.gitDir, "atomic-worktrees");
  for (const name of safeList("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (!readFileSync(`/proc/${name}/comm`, "utf8").startsWith("git")) continue;
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      if (stat.slice(stat.lastIndexOf(")") + 2)[0] === "Z") continue;
      const cwd = readlinkSync(`/proc/${name}/cwd`);
      if ((ws.path !== undefined && inside(cwd, ws.path)) || ((inside(cwd, ws.repo) || inside(cwd, ws.gitDir)) && !inside(cwd, others))) return Number(name);
    } catch {
      // gone meanwhile, or another user's (not ours to hold these locks)
    }
  }
  return undefined;
}
