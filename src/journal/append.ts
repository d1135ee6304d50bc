/**
 * What one append writes (`Journal.append`, ./journal.ts): an event of a
 * run, and with it, in the same transaction, whatever the event brings
 * about: the run's row created or patched, a work item enqueued or given
 * up, a stage index row, a prompt opened.
 */

import type { ErrorInfo } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import type { NewPrompt } from "./prompts.ts";
import type { JournalEvent, NewRunFields, RunPatch } from "./runs.ts";
import type { StageIndexEntry } from "./stage-index.ts";
import type { NewWorkItem } from "./work-queue.ts";

export interface AppendEntry {
  runId: RunId;
  type: string;
  key?: string | null;
  payload: unknown;
  /** A second append with the same key in the same run returns the first entry ("exists"). */
  idempotencyKey?: string | null;
  /** Compare-and-set: append only if the run's last seq equals this. */
  expectedSeq?: number;
  /** Present only on a run's first event: creates the runs row (refused if it exists). */
  newRun?: NewRunFields;
  patch?: RunPatch;
  /**
   * False for entries that only record progress (a stage attempt started):
   * a batch of such entries is committed without waiting for the disk, so a
   * power loss (never a process crash) may lose it. Default true.
   */
  durable?: boolean;
  /** A stage execution to put on the work queue in the same transaction (run and root from the entry). */
  work?: NewWorkItem;
  /**
   * A work item of this run the entry gives up on (a pooled stage attempt recorded as failed): abandoned in
   * the same transaction if it is still ready or leased, so no later pool of this drive runs it (a fresh pool
   * after a lost one claims every ready item of the drive).
   */
  abandonWork?: string;
  /** Record a stage (or child boundary) of this run in the stage index, in the same transaction. */
  stage?: StageIndexEntry;
  /** Open a prompt (ctx.ask) in the same transaction. */
  prompt?: NewPrompt;
  /** Defaults to Date.now() at append. */
  at?: number;
}

export type AppendOutcome =
  | { status: "appended"; seq: number }
  | { status: "exists"; seq: number; event: JournalEvent }
  | { status: "conflict"; lastSeq: number; expectedSeq: number }
  | { status: "error"; error: ErrorInfo };
