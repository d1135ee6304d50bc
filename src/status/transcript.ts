/**
 * A stage's output as the status page reads it: the stdout and stderr files
 * of one attempt (the latest by default), from a byte offset, at most
 * `MAX_CHUNK` bytes per stream per request. A reader polls with the `next`
 * offsets it got to follow a running stage. A chunk ends on a whole UTF-8
 * character while the stage may still be writing, so no character is split
 * between two reads. Known secret values are redacted from the text
 * (shared/secrets.ts; `next` still counts the file's bytes). Files are
 * opened with `openArtifactFile`: a link a stage planted in its artifact
 * directory is refused (UnsafeArtifactError), never followed.
 */

import { EVENTS_LOG, openArtifactFile, stageLogPath, TRANSCRIPT, TURNS_LOG } from "../runners/stage-logs.ts";
import { redact } from "../shared/secrets.ts";
import { closeSync, fstatSync, readSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import type { StepReport } from "../engine/run-report.ts";

export const MAX_CHUNK = 256 * 1024;

export interface OutputChunk {
  /** Byte offset the text starts at. */
  offset: number;
  /** Offset to ask for next. */
  next: number;
  /** Bytes in the file now. */
  size: number;
  text: string;
  /** More bytes are there already (ask again from `next`). */
  more: boolean;
  /** The file does not exist (yet). */
  missing: boolean;
}

export interface Transcript {
  runId: string;
  position: string;
  name: string;
  status: string;
  attempt: number;
  attempts: number;
  /** The stage may still write: ask again later. */
  live: boolean;
  stdout: OutputChunk;
  stderr: OutputChunk;
  /** `stdout` is an agent's transcript.md (the page draws it as a conversation). */
  agent: boolean;
  /**
   * Asked for (`turns=1`) and the attempt is over: per model call, the
   * tokens and cost, in order: what a CLI runner recorded per call
   * (turns.jsonl, runners/agent-files.ts), else what the provider reported
   * in the openai runner's stream (events.jsonl; OpenAI-style `usage`
   * records). Empty when there is neither.
   */
  turns?: TurnUsage[];
}

export interface TurnUsage {
  inputTokens: number;
  outputTokens: number;
  /** Micro-dollars, when the provider priced the call itself (OpenRouter's `usage.cost`). */
  costMicroUsd: number | null;
}

/** events.jsonl is read for turns up to this size (a longer one: the first turns only). */
const MAX_EVENTS_BYTES = 16 * 1024 * 1024;

/** The artifact directory of one attempt of a stage, if it has one. */
export function attemptDir(step: StepReport, attempt: number): string | undefined {
  const logged = step.attemptLog.find((a) => a.attempt === attempt)?.artifactDir;
  if (logged) return logged;
  if (attempt === step.attempts) return step.artifactDir ?? (step.outputPath ? dirname(step.outputPath) : undefined);
  return undefined;
}

export function readTranscript(
  runId: string,
  step: StepReport,
  attempt: number,
  offsets: { stdout: number; stderr: number },
  live: boolean,
  withTurns = false,
): Transcript {
  const dir = attemptDir(step, attempt);
  const latest = attempt === step.attempts;
  const stillWriting = live && latest && step.status === "running";
  const stdoutPath = dir ? stageLogPath(dir, "stdout") : undefined;
  const agent = stdoutPath !== undefined && basename(stdoutPath) === TRANSCRIPT;
  const read = (stream: "stdout" | "stderr", offset: number): OutputChunk =>
    dir ? readChunk(stream === "stdout" ? stdoutPath! : stageLogPath(dir, stream), offset, MAX_CHUNK, !stillWriting) : emptyChunk(offset);
  return {
    agent,
    ...(withTurns && agent && !stillWriting ? { turns: recordedTurns(join(dir!, TURNS_LOG)) ?? readTurns(join(dir!, EVENTS_LOG)) } : {}),
    runId,
    position: step.position,
    name: step.name,
    status: latest ? step.status : (step.attemptLog.find((a) => a.attempt === attempt)?.status ?? "failed"),
    attempt,
    attempts: step.attempts,
    live: stillWriting,
    stdout: read("stdout", offsets.stdout),
    stderr: read("stderr", offsets.stderr),
  };
}

/** The file's text (its first MAX_EVENTS_BYTES), or undefined when there is no such file (a planted link neither). */
function readSmall(path: string): string | undefined {
  const fd = openArtifactFile(path);
  if (fd === undefined) return undefined;
  try {
    const size = Math.min(fstatSync(fd).size, MAX_EVENTS_BYTES);
    const buf = Buffer.alloc(size);
    return buf.subarray(0, readSync(fd, buf, 0, size, 0)).toString("utf8");
  } finally {
    closeSync(fd);
  }
}

/** Per-call usage a CLI runner recorded (a line with `turns: 0` adds to the call before it); undefined without the file. */
export function recordedTurns(path: string): TurnUsage[] | undefined {
  const text = readSmall(path);
  if (text === undefined) return undefined;
  const turns: TurnUsage[] = [];
  for (const line of text.split("\n")) {
    let u: Record<string, unknown>;
    try {
      u = JSON.parse(line) as Record<string, unknown>;
    } catch {
      continue; // the last line, cut at the size limit
    }
    const cost = typeof u.costMicroUsd === "number" ? u.costMicroUsd : null;
    // Prompt tokens with cache reads and writes, as the openai runner's prompt_tokens count them.
    const input = (Number(u.inputTokens) || 0) + (Number(u.cacheReadTokens) || 0) + (Number(u.cacheWriteTokens) || 0);
    const last = turns.at(-1);
    if (u.turns === 0 && last) {
      last.inputTokens += input;
      last.outputTokens += Number(u.outputTokens) || 0;
      last.costMicroUsd = last.costMicroUsd === null || cost === null ? null : last.costMicroUsd + cost;
    } else {
      turns.push({ inputTokens: input, outputTokens: Number(u.outputTokens) || 0, costMicroUsd: cost });
    }
  }
  return turns;
}

/** Per-call usage from an agent's raw events: every record with an OpenAI-style `usage` object is one model call. */
export function readTurns(path: string): TurnUsage[] {
  const text = readSmall(path);
  if (text === undefined) return [];
  const turns: TurnUsage[] = [];
  for (const line of text.split("\n")) {
    if (!line.includes('"usage"')) continue;
    let usage: Record<string, unknown> | undefined;
    try {
      usage = (JSON.parse(line) as { usage?: Record<string, unknown> }).usage;
    } catch {
      continue; // a line cut at the size limit, or a provider's stray text
    }
    if (!usage || typeof usage.prompt_tokens !== "number") continue;
    const cost = typeof usage.cost === "number" ? Math.round(usage.cost * 1e6) : null;
    turns.push({ inputTokens: usage.prompt_tokens, outputTokens: Number(usage.completion_tokens) || 0, costMicroUsd: cost });
  }
  return turns;
}

function emptyChunk(offset: number): OutputChunk {
  return { offset, next: offset, size: 0, text: "", more: false, missing: true };
}

export function readChunk(path: string, offset: number, max: number, final: boolean): OutputChunk {
  const fd = openArtifactFile(path);
  if (fd === undefined) return emptyChunk(offset);
  try {
    const size = fstatSync(fd).size;
    const from = Math.min(offset, size);
    const want = Math.min(max, size - from);
    const buf = Buffer.alloc(want);
    const n = want > 0 ? readSync(fd, buf, 0, want, from) : 0;
    const capped = from + n < size;
    const keep = capped || !final ? wholeCharacters(buf, n) : n;
    return {
      offset: from,
      next: from + keep,
      size,
      text: redact(buf.subarray(0, keep).toString("utf8")),
      more: from + keep < size,
      missing: false,
    };
  } finally {
    closeSync(fd);
  }
}

/** The longest prefix of buf[0..n) that does not end inside a multi-byte UTF-8 character. */
export function wholeCharacters(buf: Uint8Array, n: number): number {
  for (let back = 1; back <= Math.min(4, n); back++) {
    const b = buf[n - back]!;
    if ((b & 0xc0) === 0x80) continue;
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}
