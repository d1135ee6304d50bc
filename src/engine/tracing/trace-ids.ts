/**
 * Trace and span ids derived from run ids (docs/design/observability.md):
 * every process that serves a run (its first drive, a resume after a
 * crash, a worker host, a stage's agent CLI) names the same trace and the
 * same spans without asking anyone. A root run's id gives its trace id; a
 * run's id its first drive's span id; a stage attempt (run, key, attempt)
 * its span id, which is also what TRACEPARENT carries to the stage.
 */

import { createHash } from "node:crypto";

function digest(text: string, hexChars: number): string {
  const hex = createHash("sha256").update(text).digest("hex").slice(0, hexChars);
  // An all-zero id is invalid in W3C trace context; a sha-256 prefix of zeros is not going to happen, but never send one.
  return /^0+$/.test(hex) ? `${hex.slice(0, -1)}1` : hex;
}

/** The trace of a root run and everything under it (32 hex digits). */
export function traceIdOf(rootRunId: string): string {
  return digest(`atomic:trace:${rootRunId}`, 32);
}

/** The span of a run's first drive (16 hex digits): a resumed drive's span is its child. */
export function runSpanIdOf(runId: string): string {
  return digest(`atomic:run:${runId}`, 16);
}

/** The span of one stage attempt (16 hex digits). */
export function stageSpanIdOf(runId: string, stageKey: string, attempt: number): string {
  return digest(`atomic:stage:${runId}\u0000${stageKey}\u0000${attempt}`, 16);
}
