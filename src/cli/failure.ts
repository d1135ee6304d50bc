/**
 * How a failure reads in the terminal, the same in `run`, `resume` and
 * `show`: one sentence (the message, and where the user's code threw it:
 * "(TypeError at review.ts:12:7)"), then the last lines of the failed
 * stage's stderr, indented; with --verbose the stack of what the workflow
 * code threw. Internal class names (StepFailedError) never appear: the
 * name shown is the one the user's code threw.
 */

import type { ErrorInfo } from "../shared/errors.ts";
import type { Style } from "./style.ts";

/** atomic's own error classes: a refused ctx call says where it was made, not which class refused it. */
const INTERNAL = new Set([
  "AtomicError", "BudgetExceededError", "CancelledError", "IllegalTransition", "IntercomError", "LeaseHeldError", "LeaseLostError",
  "NondeterminismError", "ProviderError", "SchemaProblem", "StepFailedError", "StorageError", "ToolRefused", "UnsafeArtifactError", "UsageError",
]);

export function failureSentence(info: ErrorInfo): string {
  if (!info.at) return info.message;
  const thrown = /^([A-Z]\w*): /.exec(info.stack ?? "")?.[1];
  return `${info.message} (${thrown && thrown !== "Error" && !INTERNAL.has(thrown) ? `${thrown} ` : ""}at ${info.at})`;
}

/** The lines under the sentence: stderr's last lines, and the stack with --verbose. */
export function failureDetail(info: ErrorInfo, style: Style, verbose: boolean, indent = "  "): string[] {
  const lines = (info.stderr ?? []).map((l) => `${indent}${style.dim(`stderr: ${l}`)}`);
  if (verbose && info.stack) lines.push(...info.stack.split("\n").map((l) => `${indent}${l}`));
  return lines;
}
