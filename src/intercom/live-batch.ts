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

/** A frame body that is a live batch, or undefined. */
export function asLiveBatch(body: unknown): LiveBatch | undefined {
  const b = body as Partial<LiveBatch> | null;
  if (!b || b.live !== 1 || typeof b.runId !== "string" || typeof b.stage !== "string" || typeof b.attempt !== "number" || !Array.isArray(b.events)) return undefined;
  return b as LiveBatch;
}
