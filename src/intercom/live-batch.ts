/**
 * What a live frame carries (docs/design/live-events.md): the events of one
 * stage attempt, sent to the broker group of the stage's run (live.ts) or
 * relayed from a worker host (live-remote.ts).
 */

/** One live event: a runner event (`type` and its fields) and when it was published. */
export interface LiveEvent {
  type: string;
  at: number;
  [field: string]: unknown;
}

/** What one frame carries: events of one stage attempt, in order. */
export interface LiveBatch {
  live: 1;
  runId: string;
  stage: string;
  attempt: number;
  events: LiveEvent[];
}

export function liveGroup(runId: string): string {
  return `live:${runId}`;
}

/**
 * A mark (docs/design/live-events.md, "Marks"): the event a publisher puts in a stage attempt's stream when a
 * watcher asks, once the attempt's transcript is on disk up to `bytes` (absent: the stage has no transcript
 * it can flush). Every event before it is in those bytes, every event after it is not.
 */
export const MARK_EVENT = "mark";

/** The group a run's publishers join to hear asks for marks (a body `{ liveMark: 1, runId }`). */
export function liveMarkGroup(runId: string): string {
  return `live-mark:${runId}`;
}

/** The run a body asks marks of, or undefined. */
export function markAskOf(body: unknown): string | undefined {
  const b = body as { liveMark?: unknown; runId?: unknown } | null;
  return b && b.liveMark === 1 && typeof b.runId === "string" ? b.runId : undefined;
}

/** A frame body that is a live batch, or undefined. */
export function asLiveBatch(body: unknown): LiveBatch | undefined {
  const b = body as Partial<LiveBatch> | null;
  if (!b || b.live !== 1 || typeof b.runId !== "string" || typeof b.stage !== "string" || typeof b.attempt !== "number" || !Array.isArray(b.events)) return undefined;
  return b as LiveBatch;
}
