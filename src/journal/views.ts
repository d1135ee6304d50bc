/**
 * Reads for the status server whose cost follows what changed, not the
 * history (`Journal.views`).
 *
 * Stage tallies: the stage index (kind "stage" rows) of root runs' trees,
 * grouped by root, by the stored status of the run each stage belongs to (a
 * root or a child), by state and outcome; with usage summed. One indexed
 * read per page of the run list, whatever the runs' histories hold.
 *
 * Run changes: every change of a runs row (created, an event appended, a
 * patch) gives it a new change number, increasing across the whole journal
 * in commit order, so a reader that remembers the last number it saw reads
 * only the runs that changed since (`/metrics`). A backend must keep that
 * order (SQLite: one writer at a time; a concurrent backend needs a
 * commit-ordered counter). A run deleted by retention is a change too
 * (`deleted`), numbered after every earlier change, and the numbers never
 * go back when the run that held the highest one is gone.
 */

import type { RunId } from "../shared/ids.ts";
import type { RunStatus } from "./runs.ts";
import type { StageState, StageUsage } from "./stage-index.ts";

export interface JournalViews {
  stageTallies(rootIds: readonly RunId[]): Promise<StageTally[]>;
  /**
   * Runs created, patched (status, outputs, error, end, control acknowledged)
   * or deleted after `afterChange`, in change order, at most `limit`. An
   * append without a patch is not a change: it moves the run's `lastSeq`
   * without a new change number, so a reader that follows a run's events
   * (status/metrics.ts) looks at the runs it knows to be open itself. That
   * keeps every step from rewriting the change index (on Postgres it keeps
   * the run row's update HOT and off the shared change clock).
   */
  changesSince(afterChange: number, limit: number): Promise<RunChange[]>;
}

export interface StageTally {
  rootId: RunId;
  /** Stored status of the run these stages belong to. */
  runStatus: RunStatus;
  state: StageState;
  outcome: "completed" | "failed" | null;
  stages: number;
  /** Summed over the group; null when no stage of it recorded usage. */
  usage: StageUsage | null;
}

export interface RunChange {
  /** The run was deleted (retention): `status` and `lastSeq` are its last ones. */
  deleted?: boolean;
  id: RunId;
  rootId: RunId;
  parentId: RunId | null;
  status: RunStatus;
  lastSeq: number;
  change: number;
}
