/**
 * Live events from the engine to whoever shows progress (the terminal view,
 * `--json` output, later the status page). Not journaled; the journal has
 * the durable record. Observers must be cheap and must not throw.
 */

import type { DeliveryState } from "../journal/delivery-states.ts";
import type { StageResult, Usage } from "../sdk/types.ts";
import type { ErrorInfo } from "../shared/errors.ts";
import type { RunStatus } from "../journal/runs.ts";
import type { StepKind } from "./journal-events.ts";
import type { ModelCall } from "../runners/types.ts";
import type { AppendLatencyRecord } from "./append-latency.ts";

export type EngineEvent =
  | { type: "run_started"; runId: string; parentId: string | null; workflow: string; resumed: boolean; at: number }
  /** `appendLatency`: a root's, how long the drive's journal appends took (engine/append-latency.ts). */
  | { type: "run_ended"; runId: string; status: RunStatus; error?: ErrorInfo; outputs?: unknown; appendLatency?: AppendLatencyRecord; at: number }
  | {
      type: "step_started";
      runId: string;
      position: string;
      kind: StepKind;
      name: string;
      attempt: number;
      /** For a child workflow boundary: the child's run id. */
      childRunId?: string;
      /** A stage that waits for a free worker: `step_running` says when it starts. */
      queued?: boolean;
      /** A queued stage only worker hosts can run: the queue it waits on (StageExecutor.hostQueue). */
      hostQueue?: string;
      at: number;
    }
  /** A queued stage attempt started on a worker (at: when its runner started). */
  | { type: "step_running"; runId: string; position: string; name: string; attempt: number; at: number }
  | {
      type: "step_ended";
      runId: string;
      position: string;
      kind: StepKind;
      name: string;
      status: "completed" | "failed" | "cancelled";
      replayed: boolean;
      result?: Pick<StageResult, "exitCode" | "outputPath" | "usage">;
      error?: ErrorInfo;
      at: number;
    }
  | { type: "stage_output"; runId: string; position: string; name: string; stream: "stdout" | "stderr"; text: string }
  /** A running agent stage reported usage (a delta: one model turn, or a CLI agent's step), and the model call it is of when the runner knows it. */
  | { type: "stage_usage"; runId: string; position: string; name: string; usage: Partial<Usage>; call?: ModelCall; at: number }
  /** A running agent stage's own tool call started or ended (the agent's tools, not ctx.tool). */
  | { type: "stage_tool"; runId: string; position: string; name: string; tool: string; callId?: string; state: "started" | "ended"; ok?: boolean; at: number }
  /** One attempt of a stage ended (a retried attempt too; step_ended says how the stage ended). */
  | {
      type: "attempt_ended";
      runId: string;
      position: string;
      name: string;
      attempt: number;
      status: "completed" | "failed" | "cancelled";
      error?: { code: string; message: string };
      usage?: Usage;
      at: number;
    }
  /** A stage waits to start (admission: agent sessions busy, host under pressure; the run is paused), and why; also a child workflow held by a pause (kind "child"). */
  | { type: "step_waiting"; runId: string; position: string; kind?: "stage" | "child"; name: string; reason: string; at: number }
  | { type: "log"; runId: string; message: string; at: number }
  | { type: "paused" | "unpaused"; runId: string; at: number }
  | { type: "warning"; runId: string; message: string; at: number }
  /** A delivery of a message to a stage changed state (src/journal/delivery-states.ts). */
  | {
      type: "message";
      runId: string;
      position: string;
      stage: string;
      messageId: string;
      state: DeliveryState;
      live: boolean;
      reason?: string;
      at: number;
    }
  /** A ctx.ask question opened, was answered, or timed out. */
  | {
      type: "prompt";
      runId: string;
      rootId: string;
      position: string;
      promptId: string;
      question: string;
      choices: string[] | null;
      state: "open" | "answered" | "timed_out";
      answer?: string;
      /** Who answered ("cli", "status-page", "terminal", …), once answered. */
      by?: string | null;
      at: number;
    };

export type EngineObserver = (event: EngineEvent) => void;
