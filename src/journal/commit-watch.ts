/**
 * Waiting for another process's commit instead of polling for it: a
 * process with nothing to look at until someone else writes (the service's
 * recovery duty with no run left unfinished: src/service/recovery.ts)
 * sleeps until the journal changes.
 *
 * `mark()` is taken before the reads whose answer the waiter acts on;
 * `after(mark, onCommit)` then calls `onCommit` once another process has
 * committed since that mark (at once if one already has), so no commit
 * between the reads and the wait is missed. The process's own commits on
 * the same journal do not count (a service renewing its lease does not
 * wake itself). A watch that fails calls `onCommit` too: the caller looks
 * again, as after a commit, and so never waits on a broken watch.
 *
 * Present where a commit can be seen without asking a server (the
 * embedded journal: sqlite/commit-watch.ts); absent elsewhere, and the
 * caller polls as before (Postgres).
 */

export interface CommitWatch {
  /** What this process has seen of other processes' commits so far. */
  mark(): number;
  /**
   * Calls `onCommit` once another process has committed since `mark`
   * (at once if one has, or when the watch breaks). Returns the function
   * that stops waiting, or undefined when the journal cannot be watched
   * (the caller polls).
   */
  after(mark: number, onCommit: () => void): (() => void) | undefined;
}
