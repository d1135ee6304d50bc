/**
 * The files of one stage attempt's artifact directory, by name:
 *
 * - shell stages write `stdout.log` and `stderr.log`;
 * - agent stages write `transcript.md` (their readable output),
 *   `events.jsonl` (raw events) and, only when there is something to say,
 *   `stderr.log`.
 *
 * Readers (`atomic logs`, the status page, run reports) ask `stageLogPath`
 * which file holds a stream, so an agent stage's transcript reads like a
 * shell stage's stdout without a link or a copy (every file created costs a
 * stage real time on a busy disk; bench/agents.ts).
 */

import { existsSync } from "node:fs";
import { join } from "node:path";

export const STDOUT_LOG = "stdout.log";
export const STDERR_LOG = "stderr.log";
export const TRANSCRIPT = "transcript.md";
export const EVENTS_LOG = "events.jsonl";

export type LogStream = "stdout" | "stderr";

/** The file holding `stream` in an attempt's directory: stdout.log, or an agent stage's transcript. */
export function stageLogPath(dir: string, stream: LogStream): string {
  if (stream === "stderr") return join(dir, STDERR_LOG);
  const stdout = join(dir, STDOUT_LOG);
  if (existsSync(stdout)) return stdout;
  const transcript = join(dir, TRANSCRIPT);
  return existsSync(transcript) ? transcript : stdout;
}
