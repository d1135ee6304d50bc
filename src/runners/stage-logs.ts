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

import { closeSync, existsSync, fstatSync, openSync, readSync } from "node:fs";
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

/** How much of a log's end `tailLines` reads: enough for a few lines, bounded for any file. */
const TAIL_BYTES = 8 * 1024;

/**
 * The last `n` non-empty lines of a log file (each cut at 300 characters),
 * for a failure message; [] when the file is missing or empty.
 */
export function tailLines(path: string | undefined, n = 5): string[] {
  if (!path) return [];
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return [];
  }
  try {
    const size = fstatSync(fd).size;
    const length = Math.min(size, TAIL_BYTES);
    const buf = Buffer.alloc(length);
    readSync(fd, buf, 0, length, size - length);
    const lines = buf.toString("utf8").split(/\r?\n/).filter((l) => l.trim() !== "");
    // The first line of a cut read may be partial; drop it unless it is all there is.
    if (length < size && lines.length > 1) lines.shift();
    return lines.slice(-n).map((l) => (l.length > 300 ? `${l.slice(0, 299)}…` : l));
  } catch {
    return [];
  } finally {
    closeSync(fd);
  }
}
