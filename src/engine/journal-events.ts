/**
 * The events the engine writes to the journal, and their payloads.
 *
 * - `run_started`: a run's first event (creates its runs row).
 * - `run_resumed`: a process took the run over to continue it.
 * - `step_started`: a step that has a visible start (a stage or tool
 *   attempt, a child workflow) began. Not a checkpoint: on resume the step
 *   runs again, but a child keeps the run id recorded here.
 * - `step_failed`: a stage or tool attempt failed, with its error
 *   (visibility only).
 * - `stage_running`: a stage attempt that waited for a worker (`queued` in
 *   its `step_started`) started running there (progress only).
 * - `checkpoint`: a step's recorded result. Replay returns it instead of
 *   running the step. Keyed by the step's replay position.
 * - `status_changed`: the run's status moved (the runs row is patched in
 *   the same transaction).
 * - `messages_delivered` / `message_delivered` / `message_undeliverable`:
 *   messages to stages settled (intercom; the message store changes in the
 *   same transaction). Not replayed: a resumed run reads the store.
 * - A ctx.ask is a step: `step_started` (with the prompt id, question,
 *   choices, deadline) opens it, its checkpoint records the answer.
 */

import type { ErrorInfo } from "../shared/errors.ts";
import type { AppendLatencyRecord } from "./append-latency.ts";
import type { RunStatus } from "../journal/runs.ts";

export type StepKind = "tool" | "stage" | "child" | "sleep" | "send" | "ask";

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
  /** The work queue item of a stage attempt on the pool. */
  workId?: string;
  /** When the attempt began, if that was before this record (a tool attempt is recorded once it outlasts TOOL_VISIBLE_AFTER_MS). */
  startedAt?: number;
  /** A pooled stage attempt waits for a free worker until its `stage_running` (EVENT.stageRunning). */
  queued?: boolean;
  /** With `queued`: when the workflow started the attempt (admission may have held it before this record). */
  requestedAt?: number;
  /** With `queued`: the queue it waits on when only worker hosts can run it (StageExecutor.hostQueue). */
  hostQueue?: string;
  /** A stage attempt: the runner it runs with (shell, openai, claude...), for /metrics labels. */
  runner?: string;
  /** ctx.ask: the prompt this attempt opened. */
  promptId?: string;
  question?: string;
  choices?: string[] | null;
  deadline?: number | null;
  /** An agent's ask_user question: the tool call it answers and the conversation it continues (steps/agent-asks.ts). */
  extra?: Record<string, unknown>;
  /** A stage attempt in a git worktree (engine/stage-workspace.ts): where, on which branch, from which base. */
  workspace?: { repo: string; path: string; cwd: string; branch: string; base: string; baseCommit: string };
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
  /** ctx.continueAsNew: the run that continues this one (this run ended completed, its error CONTINUED_CODE). */
  continuedAs?: string;
  /** A root's end of a drive: how long the drive's journal appends took (engine/append-latency.ts). */
  appendLatency?: AppendLatencyRecord;
}
export { CONTINUED_CODE } from "../journal/runs.ts";

export interface RunResumedPayload {
  holderId: string;
  host: string;
  pid: number;
  previousStatus: string;
  digest: string;
  digestChanged: boolean;
  /** The workflow file and working directory of this drive (run-place.ts). */
  path?: string;
  cwd?: string;
  /** "service": the local service (`atomic serve`) started this drive to recover or wake the run (src/service/). */
  drivenBy?: "service";
  /** `resume --upgrade`: from this drive on the run runs the current file (its digest is that file's code version). */
  upgraded?: boolean;
}

export const EVENT = {
  runStarted: "run_started",
  runResumed: "run_resumed",
  stepStarted: "step_started",
  stepFailed: "step_failed",
  checkpoint: "checkpoint",
  statusChanged: "status_changed",
  controlApplied: "control_applied",
  /** Queued messages handed to a stage attempt before its first turn: { stageKey, stagePath, attempt, messageIds } (no event key: not a step). */
  messagesDelivered: "messages_delivered",
  /** A message delivered to a running stage: { stageKey, messageId, stagePath, attempt, mode }. */
  messageDelivered: "message_delivered",
  /** A message that can no longer reach its stage: { stageKey, messageId, stagePath, reason }. */
  messageUndeliverable: "message_undeliverable",
  /** A stage waits for admission: { stageKey, name, reason } (no event key: not a step; progress only). */
  stageWaiting: "stage_waiting",
  /**
   * A queued stage attempt really started on a worker: { stageKey, attempt, at } (no event key; progress only).
   * `at` is when its runner started, so the attempt's time queued and time running are told apart.
   */
  stageRunning: "stage_running",
  /** Usage of a stage attempt that was cancelled (no result recorded): { stageKey, attempt, usage } (no event key). */
  usageRecorded: "usage_recorded",
  /**
   * The service stopped recovering the run and left it for a person: { reason } (no event key). Written by
   * the service under the run's lease, which it releases at once: the run stays crashed, with the reason as
   * its error, until someone resumes it (src/service/give-up.ts).
   */
  recoveryStopped: "recovery_stopped",
  /** ctx.patched / ctx.deprecatePatch reached new ground: { patchId } (no event key: it takes no replay position; ./steps/patch.ts). */
  patchRecorded: "patch_recorded",
  /**
   * ctx.continueAsNew: the run hands over to run `next` with `inputs` ({ next, inputs }; no event key). Recorded
   * before the next run starts, so a resumed hand-over continues as that run, never a second one (driver.ts).
   */
  continuedAsNew: "continued_as_new",
} as const;

/** `tool "fetch"`; with `withArgs` (when only the arguments differ) the digest too, so the two sides read differently. */
export function describeStep(id: StepIdentity, withArgs = false): string {
  return withArgs ? `${id.kind} "${id.name}" with arguments digest ${id.args}` : `${id.kind} "${id.name}"`;
}
