/**
 * The files an agent stage leaves in its attempt's artifact directory:
 *
 * - `events.jsonl`: the raw event stream, one record per line, written
 *   BEFORE it is parsed (a parser bug never loses what the agent said);
 * - `transcript.md`: a readable transcript (prompt, assistant text, tool
 *   calls and results, messages received, the outcome); `atomic logs`,
 *   `--follow` and the status page read it as the stage's stdout
 *   (../artifacts/stage-logs.ts);
 * - `stderr.log`: the agent's stderr and the runner's diagnostics, created
 *   only when there is any (most agent stages have none);
 * - `turns.jsonl` (the CLI runners): the usage of each model call, one line
 *   per call in the order of the transcript's "## Assistant" sections (a
 *   line with `turns: 0` adds to the call before it), so the status page
 *   shows per-turn tokens and cost for every runner (the openai runner's
 *   come from its raw events).
 *
 * The transcript's shape is the same for every runner (the status page
 * draws it as a conversation): "## User", "## Assistant" (one per model
 * call: its text and tool blocks), "## Message (mode)", notes "## (…)",
 * "## Warning", "## Outcome". A runner that does not see model calls start
 * (the CLI agents: only text, tools and usage arrive) writes through
 * `assistantText`/`assistantTool` and `turnEnded`: text opens an Assistant
 * section unless one is open for a call that has not ended; a tool block
 * goes in the open section, also once its call ended (the tools a call
 * asked for run after it, as in the openai runner's transcript); a call
 * that ends with no section of its own gets an empty one. A warning that
 * comes inside a section is written after it. So the n-th Assistant
 * section and the n-th call of turns.jsonl stay in step.
 *
 * Writes are buffered in memory and written synchronously: at most 200 ms
 * after the first write nothing has flushed yet (what `atomic logs
 * --follow` and the status page see of a live stage; a timer armed by that
 * write, so a stage waiting on its model with nothing buffered wakes no
 * one),
 * whenever a file's buffer reaches 16 KiB (memory stays bounded while a
 * stage streams tens of thousands of deltas), when the runner calls
 * `flush()` (the openai runner does right after sending each request: the
 * disk is written while the model answers, not on the way to the next
 * call; creating a file here costs 60-700 µs of system time), and at
 * `close()`. A file is created by its first write, and a stage that never
 * writes to stderr has no stderr.log.
 * Before, the files were created and written on the thread pool, off
 * this thread, while the stage waited on the network; on 2 CPUs that was
 * not free: every operation there wakes a pool thread and then this one,
 * competing with the model server (bench/agents.ts, a 20-turn loop:
 * threads woken 70 times per stage against 63 now and 60 for the bare
 * requests; loop ÷ requests 1.39-1.53 against 1.34-1.42 now with the files
 * in memory-backed storage, unchanged on this disk; the 50,000-delta
 * stage's peak RSS growth 41 against 33 MB).
 *
 * A write that fails (no directory, a full disk) never takes the stage
 * down: that file stops, and the stage's result still carries its text.
 *
 * Known secret values (shared/secrets.ts: provider keys, the journal's
 * password, the status token) are redacted from all three files.
 */

import { closeSync, mkdirSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";
import { EVENTS_LOG, STDERR_LOG, TRANSCRIPT, TURNS_LOG } from "../artifacts/stage-logs.ts";
import { redact } from "../shared/secrets.ts";

const FLUSH_BYTES = 16 * 1024;
const FLUSH_MS = 200;

class BufferedFile {
  private fd: number | undefined;
  /** Opening or writing failed: what comes next is dropped. */
  private broken = false;
  private closed = false;
  private pending: string[] = [];
  private size = 0;
  /** Bytes in the file (what its writes returned). */
  written = 0;

  constructor(
    readonly path: string,
    /** Makes the artifact directory (once) before the first file is created. */
    private readonly ensureDir: () => void,
    /** Told of every write that stays buffered (arms the owner's flush timer). */
    private readonly buffered: () => void,
  ) {}

  write(text: string): void {
    if (this.closed || this.broken || text.length === 0) return;
    this.pending.push(text);
    this.size += text.length;
    if (this.size >= FLUSH_BYTES) this.flush();
    else this.buffered();
  }

  flush(): void {
    if (this.size === 0 || this.broken) return;
    // Redacted per flush, not per write: a key streamed in several deltas is whole here (unless a flush splits it).
    const text = redact(this.pending.length === 1 ? this.pending[0]! : this.pending.join(""));
    this.pending = [];
    this.size = 0;
    try {
      if (this.fd === undefined) {
        this.ensureDir();
        this.fd = openSync(this.path, "w");
      }
      this.written += writeSync(this.fd, text);
    } catch {
      this.broken = true;
    }
  }

  /** Bytes in the file once what is buffered is written; undefined when a write failed (the file stopped). */
  flushed(): number | undefined {
    this.flush();
    return this.broken ? undefined : this.written;
  }

  close(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    this.pending = [];
    if (this.fd === undefined) return;
    try {
      closeSync(this.fd);
    } catch {
      // nothing more to lose
    }
    this.fd = undefined;
  }
}

/** The files of the attempts running in this process, by artifact directory (for marks: transcriptMark). */
const open = new Map<string, AgentFiles>();

/**
 * For a live mark (docs/design/live-events.md, "Marks"): writes the transcript of the attempt whose files are
 * in `artifactDir` to disk and says its size in bytes; undefined when no attempt of this process writes there
 * (a shell stage, one that ended) or its transcript stopped (a failed write). Runners write a delta to the
 * transcript and hand it to their event sink in one synchronous step, so every live event before the mark is
 * within these bytes and none after it.
 */
export function transcriptMark(artifactDir: string): number | undefined {
  return open.get(artifactDir)?.transcriptBytes();
}

export class AgentFiles {
  readonly transcriptPath: string;
  readonly eventsPath: string;
  /** Where stderr goes; the file exists only once something was written to it. */
  readonly errorPath: string;
  private readonly transcript: BufferedFile;
  private readonly events: BufferedFile;
  private readonly stderr: BufferedFile;
  private readonly turns: BufferedFile;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private dirMade = false;
  /** True while the transcript's last write was streamed text (a heading starts on a new line). */
  private midText = false;
  /** An "## Assistant" section opened by assistantText/assistantTool/turnEnded and not yet followed by another section. */
  private inAssistant = false;
  /** The open Assistant section's model call has ended (its usage came): text opens the next one. */
  private callEnded = false;
  /** Warnings that came during a model call: written once it ends. */
  private heldWarnings: string[] = [];

  constructor(readonly artifactDir: string) {
    open.set(artifactDir, this);
    this.transcriptPath = join(artifactDir, TRANSCRIPT);
    this.eventsPath = join(artifactDir, EVENTS_LOG);
    this.errorPath = join(artifactDir, STDERR_LOG);
    const ensureDir = () => this.ensureDir();
    const buffered = () => this.flushSoon();
    this.transcript = new BufferedFile(this.transcriptPath, ensureDir, buffered);
    this.events = new BufferedFile(this.eventsPath, ensureDir, buffered);
    this.stderr = new BufferedFile(this.errorPath, ensureDir, buffered);
    this.turns = new BufferedFile(join(artifactDir, TURNS_LOG), ensureDir, buffered);
  }

  private flushSoon(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => this.flush(), FLUSH_MS);
    this.timer.unref?.();
  }

  /** Makes the attempt's artifact directory (for a file of the stage's own, such as a schema). */
  ensureDir(): void {
    if (this.dirMade) return;
    mkdirSync(this.artifactDir, { recursive: true });
    this.dirMade = true;
  }

  /** One raw record, as received (a line of JSON, an SSE data payload). */
  raw(line: string): void {
    this.events.write(line.endsWith("\n") ? line : `${line}\n`);
  }

  /** A section of the transcript: "## heading" and a body. */
  section(heading: string, body = ""): void {
    if (this.inAssistant) this.releaseWarnings();
    const lead = this.midText ? "\n\n" : "";
    this.midText = false;
    this.transcript.write(`${lead}## ${heading}\n\n${body}${body && !body.endsWith("\n") ? "\n" : ""}${body ? "\n" : ""}`);
  }

  /** Streamed assistant text, appended as it arrives. */
  text(delta: string): void {
    this.midText = true;
    this.transcript.write(delta);
  }

  /** A tool call and what it returned, as a compact block. */
  tool(name: string, args: string, result: string, ok: boolean): void {
    const lead = this.midText ? "\n\n" : "";
    this.midText = false;
    const shown = result.length > 2_000 ? `${result.slice(0, 2_000)}\n… (${result.length - 2_000} more characters)` : result;
    this.transcript.write(`${lead}**tool ${name}**${ok ? "" : " (error)"} \`${args.slice(0, 300).replace(/`/g, "'")}\`\n\n\`\`\`\n${shown}\n\`\`\`\n\n`);
  }

  /** Assistant text of the model call in progress. */
  assistantText(delta: string): void {
    if (!this.inAssistant || this.callEnded) this.openAssistant();
    this.text(delta);
  }

  /** A tool block: of the call in progress, or of the call that asked for it. */
  assistantTool(name: string, args: string, result: string, ok: boolean): void {
    if (!this.inAssistant) this.openAssistant();
    this.tool(name, args, result, ok);
  }

  /** A warning section; inside a model call, after it. */
  warning(message: string): void {
    if (this.inAssistant) this.heldWarnings.push(message);
    else this.section("Warning", message);
  }

  /**
   * The attempt completed: its "Outcome" section, after a warning when the agent's final answer is empty (the
   * engine flags the stage too, steps/stage.ts: show, the page, the run's output).
   */
  completed(answer: string, structured: unknown): void {
    if (structured === undefined && answer.trim() === "") this.warning("the stage's output is empty: the agent's final answer has no text");
    this.section("Outcome", "completed");
  }

  /** A model call ended with this usage (`turns: 0`: more usage of the call before): its line in turns.jsonl; the next text opens a new section. */
  turnEnded(usage: { inputTokens: number; outputTokens: number; cacheReadTokens: number; cacheWriteTokens: number; costMicroUsd: number | null; turns: number }): void {
    this.turns.write(`${JSON.stringify(usage)}\n`);
    if (usage.turns === 0) return;
    if (!this.inAssistant || this.callEnded) this.openAssistant();
    this.callEnded = true;
  }

  private openAssistant(): void {
    this.section("Assistant");
    this.inAssistant = true;
    this.callEnded = false;
  }

  private releaseWarnings(): void {
    this.inAssistant = false;
    for (const w of this.heldWarnings.splice(0)) this.section("Warning", w);
  }

  diag(line: string): void {
    this.stderr.write(line.endsWith("\n") ? line : `${line}\n`);
  }

  /** Writes the transcript's buffered text and says the file's size (undefined: its writes failed). */
  transcriptBytes(): number | undefined {
    return this.transcript.flushed();
  }

  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.transcript.flush();
    this.events.flush();
    this.stderr.flush();
    this.turns.flush();
  }

  /** Writes what is buffered and closes every file (call once the stage's outcome is written). */
  close(): void {
    if (open.get(this.artifactDir) === this) open.delete(this.artifactDir);
    clearTimeout(this.timer);
    if (this.inAssistant) this.releaseWarnings();
    this.transcript.close();
    this.events.close();
    this.stderr.close();
    this.turns.close();
  }
}

/** The initial user turn: the prompt, preceded by messages sent before the stage started. */
export function firstPrompt(prompt: string, initial: { id: string; text: string }[] | undefined): string {
  if (!initial || initial.length === 0) return prompt;
  const block = initial.map((m) => `- ${m.text}`).join("\n");
  return `Messages received before you started:\n${block}\n\n${prompt}`;
}

/** Writes the final answer to the task's `output` file (relative to cwd; `output: "file"` made it one of the attempt's own). */
export async function writeOutputFile(request: { cwd: string; artifactDir: string; agent?: { output?: string } }, text: string, structured: unknown): Promise<string | undefined> {
  const output = request.agent?.output;
  if (!output) return undefined;
  const { resolve, dirname } = await import("node:path");
  const { writeFileSync, chmodSync, existsSync, mkdirSync } = await import("node:fs");
  const { mkdirsForUser, userFileMode } = await import("../shared/private-files.ts");
  const path = resolve(request.cwd, output);
  const body = structured !== undefined ? `${JSON.stringify(structured, null, 2)}\n` : text;
  if (dirname(path) === resolve(request.artifactDir)) {
    // an artifact: private, like the attempt's other files
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, body);
    return path;
  }
  // the user's file in the stage's cwd: the user's umask, not atomic's private one
  mkdirsForUser(dirname(path));
  const existed = existsSync(path);
  writeFileSync(path, body);
  if (!existed) chmodSync(path, userFileMode());
  return path;
}
