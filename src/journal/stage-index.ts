/**
 * The stage index: every stage (and child workflow boundary) a driver
 * started, by root run and path ("review/security"), written with the
 * stage's records (AppendEntry.stage, ./append.ts). Senders resolve
 * message addresses against it without reading a run's history
 * (./messages.ts); the status server sums it (./views.ts). States: running
 * (an attempt started), failed (the last attempt failed; it may run
 * again), finished (checkpointed: it never runs again).
 */

import type { RunId } from "../shared/ids.ts";

export const STAGE_STATES = ["queued", "running", "failed", "finished"] as const;
export type StageState = (typeof STAGE_STATES)[number];

export interface StageIndexEntry {
  /** The step's replay position in its run. */
  key: string;
  /** Names from the root run down ("review/security"). */
  path: string;
  name: string;
  kind: "stage" | "child";
  state: StageState;
  attempt: number;
  childRunId?: string;
  /** With state "finished": how the stage's recorded result ended (a failureMode "return" stage may finish failed). */
  outcome?: "completed" | "failed";
  /** Usage this record adds to the stage's sum (an attempt's usage, once: with its failure, checkpoint or cancellation). */
  usage?: StageUsage;
}

/** The summable fields of a stage's usage (integers; cost in micro-dollars). */
export interface StageUsage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  costMicroUsd: number;
  turns: number;
}

export interface StageRow extends StageIndexEntry {
  rootId: RunId;
  runId: RunId;
  updatedAt: number;
}
