/**
 * The files of one stage attempt's artifact directory, by name:
 *
 * - shell stages write `stdout.log` and `stderr.log`;
 * - agent stages write `transcript.md` (their readable output),
 *   `events.jsonl` (raw events) and, only when there is something to say,
 *   `stderr.log`;
 * - a stage with `output: "file"` writes its answer to `output.md`;
 * - an agent stage leaves the state a later stage continues from
 *   (`continueFrom`), SESSION_FILES: the openai runner's
 *   `conversation.json`, a CLI stage's `session-usage.json`, pi's
 *   `pi-session.jsonl`, a copy of claude's, codex's or gemini's own session
 *   file or opencode's export (`cli-session.jsonl`). A worker host ships them to the artifact store when
 *   the attempt ends, and a host continuing it fetches them
 *   (./session-files.ts).
 *
 * Readers (`atomic logs`, the status page, run reports) ask `stageLogPath`
 * which file holds a stream, so an agent stage's transcript reads like a
 * shell stage's stdout without a link or a copy (every file created costs a
 * stage real time on a busy disk; bench/agents.ts).
 *
 * Readers open these files with `openStageLog`, never by path alone: the
 * stage owns its artifact directory and may have replaced a file (or a
 * directory above it) with a symbolic link to something it wants shown,
 * such as /etc/shadow. Every component atomic made under the artifacts root
 * (`<run>/<position>-<name>/attempt-N/<file>`) must be what atomic made: a
 * real directory, and a regular file opened with O_NOFOLLOW. The components
 * are checked again after the open (same inode), so a directory swapped for
 * a link between the first look and the open is noticed too. A refusal is
 * one `unsafe_artifact` error naming the path.
 */

import { closeSync, constants, existsSync, fstatSync, lstatSync, openSync, type Stats } from "node:fs";
import { dirname, join } from "node:path";
import { AtomicError } from "../shared/errors.ts";
import { readTail } from "../shared/file-tail.ts";

export const STDOUT_LOG = "stdout.log";
export const STDERR_LOG = "stderr.log";
export const TRANSCRIPT = "transcript.md";
export const EVENTS_LOG = "events.jsonl";
/** An agent stage's usage per model call, one JSON line each (the CLI runners; runners/agent-files.ts). */
export const TURNS_LOG = "turns.jsonl";
/** The answer file of a stage whose `output` is "file" (engine/stage-options.ts). */
export const OUTPUT_FILE = "output.md";
/** The openai runner's whole conversation, secrets redacted (runners/openai/agent-loop.ts). */
export const CONVERSATION_FILE = "conversation.json";
/** A CLI session's usage totals as the stage last saw them (runners/cli-agents/session-totals.ts). */
export const SESSION_USAGE_FILE = "session-usage.json";
/** pi's session file, opened with `--session` (runners/cli-agents/pi.ts). */
export const PI_SESSION_FILE = "pi-session.jsonl";
/** A copy of a CLI's own session (claude's, codex's, gemini's file; opencode's export), carried to where a continuing stage runs (runners/cli-agents/cli-session-copy.ts). */
export const CLI_SESSION_FILE = "cli-session.jsonl";
/** What a stage that continues this attempt reads (the runners rewrite them whole: shipped once, when the attempt ends). */
export const SESSION_FILES: readonly string[] = [CONVERSATION_FILE, SESSION_USAGE_FILE, PI_SESSION_FILE, CLI_SESSION_FILE];

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
  let fd: number | undefined;
  try {
    // Not by path: a link the stage planted would put another file into the failure message.
    fd = openArtifactFile(path);
  } catch {
    return [];
  }
  if (fd === undefined) return [];
  try {
    const { text, cut } = readTail(fd, TAIL_BYTES);
    const lines = text.split(/\r?\n/).filter((l) => l.trim() !== "");
    // The first line of a cut read may be partial; drop it unless it is all there is.
    if (cut && lines.length > 1) lines.shift();
    return lines.slice(-n).map((l) => (l.length > 300 ? `${l.slice(0, 299)}…` : l));
  } catch {
    return [];
  } finally {
    closeSync(fd);
  }
}

/** Directories atomic made above a log file: `<run>/<position>-<name>/attempt-N`. */
const OWN_DIRS = 3;

/** A stage's artifact file that is a link, or not a regular file: refused, not followed. */
export class UnsafeArtifactError extends AtomicError {
  constructor(readonly path: string, what: string) {
    super("unsafe_artifact", `refusing to read ${path}: ${what}; atomic does not follow links in a stage's artifact directory`, "usage", {
      hint: "the stage replaced its own output file; look at the stage's command",
    });
  }
}

/** lstat of the directories atomic made above `path`, each required to be a real directory. */
function ownDirs(path: string): Stats[] {
  const out: Stats[] = [];
  let dir = dirname(path);
  for (let i = 0; i < OWN_DIRS; i++) {
    const st = lstatSync(dir, { throwIfNoEntry: false });
    if (!st) break; // missing: the open below finds nothing either
    if (!st.isDirectory()) throw new UnsafeArtifactError(path, `${dir} is ${st.isSymbolicLink() ? "a symbolic link" : "not a directory"}`);
    out.push(st);
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return out;
}

/**
 * Opens a file of a stage's artifact directory for reading without
 * following a link anywhere under the artifacts root: its descriptor, or
 * undefined when the file does not exist. Throws UnsafeArtifactError.
 */
export function openArtifactFile(path: string): number | undefined {
  const before = ownDirs(path);
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR") return undefined;
    if (code === "ELOOP" || code === "EMLINK") throw new UnsafeArtifactError(path, "it is a symbolic link");
    throw err;
  }
  try {
    if (!fstatSync(fd).isFile()) throw new UnsafeArtifactError(path, "it is not a regular file");
    const after = ownDirs(path);
    if (after.length !== before.length || after.some((st, i) => st.ino !== before[i]!.ino || st.dev !== before[i]!.dev)) {
      throw new UnsafeArtifactError(path, "a directory above it was replaced while it was opened");
    }
    return fd;
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}
