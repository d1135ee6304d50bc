/**
 * What the engine sees of traces (./tracing.ts decides whether they are on;
 * ./otel-tracer.ts is the one implementation): kept apart so that the
 * engine and the tracer depend on it and not on each other.
 */

import type { JournalEvent } from "../../journal/runs.ts";
import type { StageRequest } from "../../runners/types.ts";
import type { EngineObserver } from "../observer.ts";

export interface Tracer {
  /** Every engine event of the drives of this process. */
  readonly observe: EngineObserver;
  /** A stage attempt is about to be executed: its span starts; the TRACEPARENT for its processes. */
  stageAttempt(request: StageRequest, workflow: string): string | undefined;
  /** A run whose driver was lost is resumed: the spans it left open are ended, as lost, from its events. */
  recover(runId: string, workflow: string, events: readonly JournalEvent[]): void;
  /**
   * Sends what is pending; bounded in time (a receiver that is down does not hold the process). Returns how many
   * spans ended in this process since the last flush did not reach the receiver (dropped).
   */
  flush(): Promise<number>;
}

export interface TraceSettings {
  protocol: "http/protobuf" | "http/json";
  /** OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true: prompts and answers go into the spans. */
  captureContent: boolean;
}

