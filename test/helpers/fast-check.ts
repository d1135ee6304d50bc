/**
 * Settings shared by the randomized (property) tests, which use fast-check.
 *
 * `fc.assert` prints, on failure, the seed, the counterexample's path and
 * the shrunk counterexample. Replay exactly that run with
 * `FC_SEED=<seed> FC_PATH=<path> bun test <file>` (FC_PATH is optional: the
 * seed alone re-runs the same sequence and shrinks again). Without FC_SEED
 * every run draws a fresh seed.
 */

import type { Parameters } from "fast-check";

export function fcParams<T>(numRuns: number): Parameters<T> {
  const seed = process.env.FC_SEED?.trim();
  const path = process.env.FC_PATH?.trim();
  if (seed && !Number.isInteger(Number(seed))) throw new Error(`FC_SEED must be an integer (got ${seed})`);
  return { numRuns, ...(seed ? { seed: Number(seed) } : {}), ...(path ? { path } : {}) };
}
