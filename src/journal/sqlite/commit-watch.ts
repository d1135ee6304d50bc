/**
 * The embedded journal's commit watch (../commit-watch.ts says what it
 * promises): every commit, of any process, writes the write-ahead log
 * (`atomic.db-wal`), so an inotify watch of that file (fs.watch) wakes on
 * each one, and SQLite's `pragma data_version`, which changes on this
 * connection only when another connection has committed, tells another
 * process's commit from this process's own.
 *
 * The log file exists while any connection is open (this one included)
 * and keeps its inode: a checkpoint rewrites or truncates it in place.
 */

import type { Database } from "bun:sqlite";
import { watch, type FSWatcher } from "node:fs";
import type { CommitWatch } from "../commit-watch.ts";

export class SqliteCommitWatch implements CommitWatch {
  constructor(
    private readonly db: Database,
    private readonly path: string,
  ) {}

  mark(): number {
    return this.db.query<{ data_version: number }, []>("pragma data_version").get()?.data_version ?? 0;
  }

  after(mark: number, onCommit: () => void): (() => void) | undefined {
    let watcher: FSWatcher | undefined;
    const stop = () => {
      watcher?.close();
      watcher = undefined;
    };
    const fire = () => {
      if (!watcher) return;
      stop();
      onCommit();
    };
    const check = () => {
      if (!watcher) return;
      let changed = true; // a read that fails (the file gone, the connection closed) is looked into by the caller
      try {
        changed = this.mark() !== mark;
      } catch {}
      if (changed) fire();
    };
    try {
      watcher = watch(`${this.path}-wal`, check);
    } catch {
      return undefined;
    }
    watcher.on("error", fire);
    check(); // a commit between the mark and the watch
    return stop;
  }
}
