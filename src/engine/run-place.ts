/**
 * Where a run runs: its working directory and its workflow file, as
 * recorded in its journal.
 *
 * A run records the directory it started in (`run_started.cwd`): shell
 * stages run there, relative paths in the workflow mean what they meant,
 * and the project's `.atomic/config` is the one it started with. `atomic
 * resume` runs the rest in that directory, wherever it is typed. A resume
 * that names another workflow file (`--workflow FILE`: the file moved)
 * records it (`run_resumed.path`), so the next resume finds it; replay still
 * checks that the recorded steps match the file. Older runs recorded no
 * directory: they resume where resume is typed, as before. Each drive
 * records its host too: a run belongs to the host of its last drive for the
 * service's recovery (service/host-scope.ts).
 */

import { existsSync, statSync } from "node:fs";
import type { JournalEvent, RunRecord } from "../journal/runs.ts";
import { UsageError } from "../shared/errors.ts";
import { EVENT } from "./journal-events.ts";

export interface RunPlace {
  /** The working directory the run started in; undefined for runs recorded before it was. */
  cwd: string | undefined;
  /** The workflow file: the last one a resume named, else the one it started with. */
  path: string;
  /** The host of its last drive (run_started or run_resumed); undefined for runs recorded before it was. */
  host: string | undefined;
}

export function recordedPlace(run: RunRecord, events: readonly JournalEvent[]): RunPlace {
  let cwd: string | undefined;
  let path = run.workflowPath;
  let host: string | undefined;
  for (const e of events) {
    if (e.type !== EVENT.runStarted && e.type !== EVENT.runResumed) continue;
    const p = e.payload as { cwd?: unknown; path?: unknown; host?: unknown };
    if (typeof p.cwd === "string") cwd = p.cwd;
    if (typeof p.host === "string") host = p.host;
    if (e.type === EVENT.runResumed && typeof p.path === "string") path = p.path;
  }
  return { cwd, path, host };
}

/** Refuses a recorded directory that is gone (or is not a directory) in one sentence with a hint. */
export function checkRunDir(runId: string, cwd: string): void {
  if (existsSync(cwd) && statSync(cwd).isDirectory()) return;
  throw new UsageError("run_dir_missing", `run ${runId} started in ${cwd}, which no longer exists`, {
    hint: `recreate that directory (or move the project back), or resume it elsewhere with: atomic resume ${runId} --cwd DIR`,
  });
}
