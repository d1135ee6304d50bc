/**
 * Three task options that shape a stage's request in the root, before any
 * runner sees it:
 *
 * - `reads`: files attached to the prompt. Read once, when the stage is
 *   about to start (its first attempt), relative to its cwd; bounded per
 *   file (READ_FILE_LIMIT) and in all (READ_TOTAL_LIMIT), a cut file saying
 *   how much was left out. A file that cannot be read fails the step
 *   (`read_failed`) before anything is recorded: an attachment never goes
 *   missing silently. Replay is exact because a recorded stage returns its
 *   checkpoint without reading the files again; the paths (not the
 *   contents) are part of the step's identity.
 * - `continueFrom` / `fork`: which earlier session the runner resumes. The
 *   runner must say it can (Runner.sessions), the earlier result must be an
 *   agent stage's (an artifact directory, and a session id for the CLIs
 *   that resume by id); otherwise the step fails before it starts
 *   (`bad_continue`). The earlier session (id, or artifact directory) and
 *   the fork flag are part of the step's identity, so a resumed run that
 *   continues another session is a nondeterminism error, not a silent
 *   change. The continuing stage runs with the earlier stage's runner,
 *   model and cwd (recorded in its result) unless it names its own; another
 *   runner fails the step, naming both. The inherited values are not part
 *   of the identity: a run recorded before inheritance replays unchanged.
 * - `output: "file"`: the answer's file is `output.md` in the attempt's
 *   artifact directory, and the result keeps the path, not the text.
 */

import { readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { StageResult, TaskOptions } from "../sdk/types.ts";
import { StepFailedError } from "../shared/errors.ts";
import type { Runner, StageRequest } from "../runners/types.ts";
import { OUTPUT_FILE } from "../artifacts/stage-logs.ts";

export const READ_FILE_LIMIT = 64 * 1024;
export const READ_TOTAL_LIMIT = 256 * 1024;

/** What the options add to the step's replay identity (nothing when unused, so older journals replay unchanged). */
export function identityExtras(opts: TaskOptions): Record<string, unknown> {
  const extras: Record<string, unknown> = {};
  if (opts.reads?.length) extras.reads = opts.reads;
  if (opts.workspace !== undefined) extras.workspace = opts.workspace;
  if (opts.continueFrom) extras.continueFrom = { session: opts.continueFrom.sessionId ?? earlierDir(opts.continueFrom) ?? null, fork: opts.fork === true };
  return extras;
}

function earlierDir(earlier: StageResult): string | undefined {
  const file = earlier.eventsPath ?? earlier.transcriptPath;
  return typeof file === "string" ? dirname(file) : undefined;
}

/**
 * The task's options with the runner, model and cwd of the stage it
 * continues (`continueFrom`) filled in where the task names none; a task
 * naming another runner than the earlier stage's fails before it starts.
 */
export function inheritFromEarlier(name: string, opts: TaskOptions): TaskOptions {
  const earlier = opts.continueFrom as StageResult | null | undefined;
  if (!earlier || typeof earlier !== "object" || opts.shell !== undefined) return opts;
  if (opts.runner !== undefined && earlier.runner !== undefined && opts.runner !== earlier.runner) {
    throw bad(name, `continueFrom: the earlier stage ran on the ${earlier.runner} runner, this one asks for ${opts.runner}; a session continues only on its own runner`, `leave runner out (it runs on ${earlier.runner}), or start a new session without continueFrom`);
  }
  const inherited: TaskOptions = { ...opts };
  if (opts.runner === undefined && typeof earlier.runner === "string") inherited.runner = earlier.runner;
  if (opts.model === undefined && typeof earlier.model === "string") inherited.model = earlier.model;
  if (opts.cwd === undefined && typeof earlier.cwd === "string") inherited.cwd = earlier.cwd;
  return inherited;
}

/** The request's continueFrom, or a step failure saying why this runner cannot continue that result. */
export function continuation(name: string, opts: TaskOptions, runnerKind: string, runner: Runner): StageRequest["continueFrom"] {
  if (opts.continueFrom === undefined) {
    if (opts.fork) throw bad(name, "fork needs continueFrom (the earlier stage's result)", "write ctx.task(name, { continueFrom: earlier, fork: true, prompt })");
    return undefined;
  }
  const earlier = opts.continueFrom as StageResult | null;
  if (!runner.sessions) throw bad(name, `the ${runnerKind} runner has no agent session to continue`, "continueFrom works with agent runners (openai, claude, codex, gemini, opencode, pi)");
  if (opts.fork && !runner.sessions.fork) throw bad(name, `the ${runnerKind} runner cannot fork a session`, "leave fork out to continue the session itself");
  const dir = earlier && typeof earlier === "object" ? earlierDir(earlier) : undefined;
  if (!dir) throw bad(name, "continueFrom needs the result of an earlier agent stage (it has no transcript)", "pass what ctx.task returned for an agent stage");
  if (runner.sessions.byId && !earlier!.sessionId) {
    throw bad(name, `continueFrom: the earlier stage's result has no session id for ${runnerKind} to resume`, `continue a stage the ${runnerKind} runner ran`);
  }
  return { ...(earlier!.sessionId ? { sessionId: earlier!.sessionId } : {}), artifactDir: dir, fork: opts.fork === true };
}

function bad(name: string, message: string, hint: string): StepFailedError {
  return new StepFailedError(name, `stage "${name}": ${message}`, { code: "bad_continue", hint });
}

/** The prompt with the `reads` files attached (see the header). */
export function attachReads(name: string, prompt: string, reads: readonly string[], cwd: string): string {
  if (!Array.isArray(reads)) {
    throw new StepFailedError(name, `stage "${name}": reads must be an array of paths`, { code: "bad_step", hint: 'write reads: ["notes.md"]' });
  }
  if (reads.length === 0) return prompt;
  let budget = READ_TOTAL_LIMIT;
  const blocks: string[] = [];
  for (const path of reads) {
    if (typeof path !== "string" || path === "") throw readFailed(name, String(path), "not a path");
    const full = resolve(cwd, path);
    let bytes: Buffer;
    try {
      if (statSync(full).isDirectory()) throw readFailed(name, path, "it is a directory");
      bytes = readFileSync(full);
    } catch (err) {
      if (err instanceof StepFailedError) throw err;
      const code = (err as NodeJS.ErrnoException).code;
      throw readFailed(name, path, code === "ENOENT" ? "no such file" : code === "EACCES" ? "permission denied" : (err as Error).message);
    }
    const room = Math.min(READ_FILE_LIMIT, budget);
    const kept = bytes.subarray(0, room);
    budget -= kept.length;
    const cut = bytes.length - kept.length;
    const note = cut > 0 ? `\n(cut: ${cut} of ${bytes.length} bytes left out)` : "";
    blocks.push(`<file path="${path}">\n${kept.toString("utf8")}${note}\n</file>`);
  }
  return `${prompt}\n\nAttached files (${reads.length}): ${reads.join(", ")}\n\n${blocks.join("\n\n")}`;
}

function readFailed(name: string, path: string, why: string): StepFailedError {
  return new StepFailedError(name, `stage "${name}": reads: cannot read ${path}: ${why}`, {
    code: "read_failed",
    hint: "create the file before the stage, or leave it out of reads",
  });
}

/** `output: "file"`: the attempt's answer file. */
export function outputFile(artifactDir: string): string {
  return join(artifactDir, OUTPUT_FILE);
}

/** A completed stage's result in file mode: the path, not the text. */
export function fileResult(result: StageResult, path: string | undefined): StageResult {
  if (result.status !== "completed") return result;
  return { ...result, text: "", ...(path ? { outputPath: path } : {}) };
}
