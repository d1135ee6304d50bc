/**
 * The stage index: every stage (and child workflow boundary) a driver
 * started, by root run and path ("review/security"), written with the
 * stage's records (AppendEntry.stage, ./append.ts). Senders resolve
 * message addresses against it without reading a run's history
 * (./messages.ts); the status server sums it (./views.ts). States: queued
 * (an attempt waits for a free worker), running (an attempt started),
 * failed (the last attempt failed; it may run again), finished
 * (checkpointed: it never runs again).
 *
 * A row only moves forward: a record of an older attempt, or of the same
 * attempt in an earlier state (queued < running < failed, finished), leaves
 * its state, outcome and time as they are; its usage still adds up. A
 * progress record (stage_running, written a moment after a pooled stage
 * started) can reach the journal after the attempt's end record on a busy
 * machine, and must not show a finished stage as running again.
 */

import type { RunId } from "../shared/ids.ts";

export const STAGE_STATES = ["queued", "running", "failed", "finished"] as const;
export type StageState = (typeof STAGE_STATES)[number];

/**
 * The SQL condition (both dialects) under which a stage row takes the incoming record's state, outcome and
 * time: `old` names the stored row, `next` the incoming values (e.g. "stage_index" and "excluded").
 */
export function stageRecordMovesRow(old: string, next: string): string {
  const rank = (t: string) => `(case ${t}.state when 'queued' then 0 when 'running' then 1 else 2 end)`;
  return `(${next}.attempt > ${old}.attempt or (${next}.attempt = ${old}.attempt and ${rank(next)} >= ${rank(old)}))`;
}

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
