/**
 * The events the engine writes to the journal, and their payloads.
 *
 * - `run_started`: a run's first event (creates its runs row).
 * - `run_resumed`: a process took the run over to continue it.
 * - `step_started`: a step that has a visible start (a stage attempt, a
 *   child workflow) began. Not a checkpoint: on resume the step runs again,
 *   but a child keeps the run id recorded here.
 * - `step_failed`: a stage attempt failed (visibility only).
 * - `checkpoint`: a step's recorded result. Replay returns it instead of
 *   running the step. Keyed by the step's replay position.
 * - `status_changed`: the run's status moved (the runs row is patched in
 *   the same transaction).
 */

import type { ErrorInfo } from "../shared/errors.ts";
import type { RunStatus } from "../journal/types.ts";

export type StepKind = "tool" | "stage" | "child" | "sleep";

/** What identifies a step at a position: compared on replay. */
export interface StepIdentity {
  kind: StepKind;
  name: string;
  /** Digest of the step's arguments (command, tool args, child inputs). */
  args: string;
}

export interface StepStartedPayload extends StepIdentity {
  attempt?: number;
  artifactDir?: string;
  childRunId?: string;
}

export interface StepFailedPayload extends StepIdentity {
  attempt: number;
  error: ErrorInfo;
}

export interface CheckpointPayload extends StepIdentity {
  /** The step's result as JSON (undefined when the step returns nothing). */
  result?: unknown;
  startedAt?: number;
}

export interface StatusChangedPayload {
  from: RunStatus | null;
  to: RunStatus;
  reason?: string;
  error?: ErrorInfo;
}

export interface RunResumedPayload {
  holderId: string;
  host: string;
  pid: number;
  previousStatus: string;
  digest: string;
  digestChanged: boolean;
}

export const EVENT = {
  runStarted: "run_started",
  runResumed: "run_resumed",
  stepStarted: "step_started",
  stepFailed: "step_failed",
  checkpoint: "checkpoint",
  statusChanged: "status_changed",
} as const;

/** `tool "fetch"`; with `withArgs` (when only the arguments differ) the digest too, so the two sides read differently. */
export function describeStep(id: StepIdentity, withArgs = false): string {
  return withArgs ? `${id.kind} "${id.name}" with arguments digest ${id.args}` : `${id.kind} "${id.name}"`;
}
