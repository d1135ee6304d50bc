/**
 * The runner interface: one contract for everything that executes a stage
 * (the shell runner here; the OpenAI agent loop and CLI agents later).
 *
 * `start(request)` returns a handle at once. The handle streams events
 * (output lines, text deltas, tool calls, usage), accepts messages in one of
 * three delivery modes, can be interrupted (end the current turn) or
 * cancelled (end everything, kill the process group), and settles `result`
 * exactly once. A runner decides success from its final event, not only from
 * an exit code; `result` never rejects: failures are results with
 * `status: "failed"` and an error code.
 *
 * A stage request is plain data, so the worker pool can ship it to another
 * process unchanged.
 */

import type { StageResult, Usage } from "../sdk/types.ts";

export type DeliveryMode = "steer" | "followUp" | "interrupt";

export interface StageRequest {
  /** Run and stage identity, for logs and environment variables. */
  runId: string;
  stageKey: string;
  stageName: string;
  attempt: number;
  runner: string;
  command?: string;
  prompt?: string;
  model?: string;
  cwd: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  /** Directory for this attempt's files (stdout.log, stderr.log, transcript). */
  artifactDir: string;
  /** The work queue item carrying this request, when it runs on the worker pool. */
  workId?: string;
  /**
   * Messages sent to this stage before it started, in order: delivered
   * before anything else (a shell stage: written to stdin first; an agent:
   * a first user-context block, "Messages received before you started").
   */
  initialMessages?: { id: string; text: string }[];
}

export type RunnerEvent =
  | { type: "started"; pid?: number; sessionId?: string }
  | { type: "output"; stream: "stdout" | "stderr"; text: string }
  | { type: "text_delta"; text: string }
  | { type: "tool_start"; name: string; id?: string }
  | { type: "tool_end"; name: string; id?: string; ok: boolean }
  | { type: "usage"; usage: Partial<Usage> };

export interface RunnerHandle {
  readonly result: Promise<StageResult>;
  send(message: string, mode: DeliveryMode): Promise<void>;
  /** End the current turn; for a shell stage, SIGINT to its process group. */
  interrupt(): void;
  /** End the stage now: the whole process group is killed; result settles "cancelled". */
  cancel(reason?: string): void;
}

export interface Runner {
  readonly kind: string;
  start(request: StageRequest, onEvent: (event: RunnerEvent) => void): RunnerHandle;
}
