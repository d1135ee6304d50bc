/**
 * Turns on a worker host's checkout (`atomic worker --repo DIR`;
 * docs/design/worktrees.md, "On a worker host"): the host's git work there
 * that reads or rewrites what all worktrees share runs one piece at a time.
 *
 * The host opens its stages' worktrees (fleet/host-workspace.ts: fetch,
 * update-ref, branch, worktree add) and sweeps its ended runs' worktrees
 * (fleet/host-worktree-sweep.ts: worktree list, worktree remove, update-ref
 * -d, worktree prune) in one checkout, each at any moment: a sweep follows
 * every stage's end, while the next stages open theirs. Run side by side,
 * git's commands meet each other's half-done work: a `worktree prune` sees
 * a worktree `worktree add` has only begun (its admin directory made, its
 * files not yet written) and deletes it, so the add dies; a `worktree
 * list` reads the files of one being removed; a fetch and a delete want the
 * same remote-tracking ref's lock, and the loser fails at once ("Unable to
 * create '…lock': File exists"). Each such failure would fail a stage that
 * did nothing wrong.
 *
 * So each piece takes its turn: `inTurn(repo, work)` starts `work` when
 * every piece queued before it on the same checkout has settled, in the
 * order they were queued. What touches one worktree only (a stage's own
 * commits, the commit of what it left, the push of its branch) needs no
 * turn. The turns are this process's: hosts that share one checkout at the
 * same time are not ordered by them.
 */

import { resolve } from "node:path";

interface Turns {
  /** Settles when the last piece queued so far has settled. */
  tail: Promise<unknown>;
  /** Pieces queued and not started yet. */
  waiting: number;
}

const checkouts = new Map<string, Turns>();

/** Runs `work` when the pieces queued before it on the checkout `repo` have settled; its own result or error. */
export function inTurn<T>(repo: string, work: () => Promise<T>): Promise<T> {
  const key = resolve(repo);
  let turns = checkouts.get(key);
  if (!turns) checkouts.set(key, (turns = { tail: Promise.resolve(), waiting: 0 }));
  const own = turns;
  own.waiting++;
  const done = own.tail.then(() => {
    own.waiting--;
    return work();
  });
  // The next piece goes after this one, whether it succeeded or failed.
  own.tail = done.catch(() => {});
  return done;
}

/** How many pieces wait for their turn on the checkout `repo` now. */
export function waitingTurns(repo: string): number {
  return checkouts.get(resolve(repo))?.waiting ?? 0;
}
