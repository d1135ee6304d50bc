/**
 * A stage's output as the status page reads it: the stdout and stderr files
 * of one attempt (the latest by default), from a byte offset, at most
 * `MAX_CHUNK` bytes per stream per request. A reader polls with the `next`
 * offsets it got to follow a running stage. A chunk ends on a whole UTF-8
 * character while the stage may still be writing, so no character is split
 * between two reads. Known secret values are redacted from the text
 * (shared/secrets.ts; `next` still counts the file's bytes). Files are
 * read where this machine finds them (artifacts/stage-files.ts): the
 * attempt's directory when the stage ran here, opened with
 * `openArtifactFile` (a link a stage planted is refused with
 * UnsafeArtifactError, never followed), else the artifact store a worker
 * host shipped them to, whose cap may have dropped a file's head (`dropped`;
 * the chunk then starts at a later offset than asked).
 */

import { EVENTS_LOG, TRANSCRIPT, TURNS_LOG } from "../artifacts/stage-logs.ts";
import { logNameOf, readLocal, type StageFiles } from "../artifacts/stage-files.ts";
import type { ArtifactChunk } from "../artifacts/store.ts";
import { redact } from "../shared/secrets.ts";
import { dirname } from "node:path";
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
  /** Bytes the artifact store's cap dropped from the file's head (0 for a local file): offsets below it are gone. */
  dropped: number;
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

/**
 * One attempt's output from `files` (undefined: the attempt has no files
 * this machine can read).
 */
export async function readTranscript(
  runId: string,
  step: StepReport,
  attempt: number,
  /** Where each stream's read starts; `stdoutEnd`: the stdout read stops there (attach reads up to a mark). */
  offsets: { stdout: number; stderr: number; stdoutEnd?: number | undefined },
  live: boolean,
  withTurns: boolean,
  files: StageFiles | undefined,
): Promise<Transcript> {
  const latest = attempt === step.attempts;
  const stillWriting = live && latest && step.status === "running";
  const stdoutName = files ? await logNameOf(files, "stdout") : undefined;
  const agent = stdoutName === TRANSCRIPT;
  const read = async (stream: "stdout" | "stderr", offset: number, end = Number.POSITIVE_INFINITY): Promise<OutputChunk> =>
    files ? chunkOf(await files.read(stream === "stdout" ? stdoutName! : await logNameOf(files, stream), offset, Math.max(0, Math.min(MAX_CHUNK, end - offset))), offset, !stillWriting) : emptyChunk(offset);
  const turns = withTurns && agent && !stillWriting ? (recordedTurns(await readSmall(files!, TURNS_LOG)) ?? readTurns(await readSmall(files!, EVENTS_LOG))) : undefined;
  return {
    agent,
    ...(turns ? { turns } : {}),
    runId,
    position: step.position,
    name: step.name,
    status: latest ? step.status : (step.attemptLog.find((a) => a.attempt === attempt)?.status ?? "failed"),
    attempt,
    attempts: step.attempts,
    live: stillWriting,
    stdout: await read("stdout", offsets.stdout, offsets.stdoutEnd),
    stderr: await read("stderr", offsets.stderr),
  };
}

/** The file's text (its first MAX_EVENTS_BYTES), or undefined when there is no such file (a planted link neither). */
async function readSmall(files: StageFiles, name: string): Promise<string | undefined> {
  const chunk = await files.read(name, 0, MAX_EVENTS_BYTES);
  return chunk ? Buffer.from(chunk.data).toString("utf8") : undefined;
}

/** Per-call usage a CLI runner recorded in turns.jsonl (a line with `turns: 0` adds to the call before it); undefined without the file. */
export function recordedTurns(text: string | undefined): TurnUsage[] | undefined {
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

/** Per-call usage from an agent's raw events (events.jsonl): every record with an OpenAI-style `usage` object is one model call. */
export function readTurns(text: string | undefined): TurnUsage[] {
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
  return { offset, next: offset, size: 0, text: "", more: false, missing: true, dropped: 0 };
}

/** A local file's chunk (the tests' way in; the page reads through StageFiles). */
export function readChunk(path: string, offset: number, max: number, final: boolean): OutputChunk {
  return chunkOf(readLocal(path, offset, max), offset, final);
}

/** What was read as the page gets it: cut at a whole character unless the file is final and all was read. */
function chunkOf(chunk: ArtifactChunk | undefined, offset: number, final: boolean): OutputChunk {
  if (!chunk) return emptyChunk(offset);
  const n = chunk.data.length;
  const capped = chunk.offset + n < chunk.size;
  const keep = capped || !final ? wholeCharacters(chunk.data, n) : n;
  return {
    offset: chunk.offset,
    next: chunk.offset + keep,
    size: chunk.size,
    text: redact(Buffer.from(chunk.data.buffer, chunk.data.byteOffset, keep).toString("utf8")),
    more: chunk.offset + keep < chunk.size,
    missing: false,
    dropped: chunk.dropped,
  };
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
