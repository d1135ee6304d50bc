/**
 * The fake provider's latency of a paced reply (bench/fake-openai-server.ts):
 * 300 to 800 ms, spread over the stages by a fixed hash of the stage's index
 * and turn, so every run sees the same latencies and a benchmark can add
 * them up for its ideal makespan without asking the server.
 */

export const MIN_LATENCY_MS = 300;
export const MAX_LATENCY_MS = 800;

export function latencyMs(stage: number, turn: number): number {
  // Knuth's multiplicative hash of (stage, turn): spread evenly, the same in every run.
  const h = Math.imul((stage * 31 + turn) >>> 0, 2654435761) >>> 0;
  return MIN_LATENCY_MS + (h % (MAX_LATENCY_MS - MIN_LATENCY_MS + 1));
}
