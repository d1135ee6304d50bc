/**
 * The files an agent stage leaves in its attempt's artifact directory:
 *
 * - `events.jsonl`: the raw event stream, one record per line, written
 *   BEFORE it is parsed (a parser bug never loses what the agent said);
 * - `transcript.md`: a readable transcript (prompt, assistant text, tool
 *   calls and results, messages received, the outcome); `atomic logs`,
 *   `--follow` and the status page read it as the stage's stdout
 *   (stage-logs.ts);
 * - `stderr.log`: the agent's stderr and the runner's diagnostics, created
 *   only when there is any (most agent stages have none).
 *
 * Writes are buffered (flushed at 16 KiB and every 200 ms) so a stage
 * streaming tens of thousands of deltas costs a few hundred syscalls and a
 * bounded amount of memory; `close()` writes the rest and closes. The
 * directory and files are created, and first written, in the background,
 * on the thread pool: creating a file and its first write cost 30 to 600 µs
 * of kernel time on this disk (its journal), as much as several model turns
 * against a local server, and are better spent while the stage waits on the
 * network. What is written meanwhile waits in the buffer.
 */

import { closeSync, open, write as writeAsync, writeSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { EVENTS_LOG, STDERR_LOG, TRANSCRIPT } from "./stage-logs.ts";

const FLUSH_BYTES = 16 * 1024;
const FLUSH_MS = 200;

class BufferedFile {
  private fd: number | undefined;
  private ready: Promise<void> | undefined;
  private closed = false;
  private pending: string[] = [];
  private size = 0;
  /** The write in flight on the thread pool (one at a time, so they land in order). */
  private writing: Promise<void> | undefined;
  /** A first write was started (it is the slow one: started as soon as there is anything to write). */
  private started = false;
  /** `lazy`: the file is created on the first write only. */
  constructor(
    readonly path: string,
    private readonly dirReady: Promise<unknown>,
    lazy = false,
  ) {
    if (!lazy) this.open();
  }

  private open(): void {
    this.ready = this.dirReady.then(
      () =>
        new Promise<void>((resolve) => {
          open(this.path, "w", (err, fd) => {
            // an error (no artifact directory): the stage still runs; its result carries the text
            if (!err) this.fd = fd;
            resolve();
            // The first write to a new file is the slow one (the filesystem's journal): done now, off the stage's end.
            this.flush();
          });
        }),
      () => {},
    );
  }

  write(text: string): void {
    if (this.closed || text.length === 0) return;
    if (!this.ready) this.open();
    this.pending.push(text);
    this.size += text.length;
    if (this.size >= FLUSH_BYTES || !this.started) this.flush();
  }

  /** Starts writing what is buffered, on the thread pool (nothing to do while a write is in flight: it flushes again). */
  flush(): void {
    const fd = this.fd;
    if (fd === undefined || this.size === 0 || this.writing || this.closed) return;
    const text = this.pending.join("");
    this.pending = [];
    this.size = 0;
    this.started = true;
    this.writing = new Promise((resolve) => {
      writeAsync(fd, text, () => {
        // an error (a full disk) must not take the stage down; the result still carries the text
        this.writing = undefined;
        resolve();
        if (this.size >= FLUSH_BYTES) this.flush();
      });
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.ready;
    await this.writing;
    const fd = this.fd;
    this.fd = undefined;
    if (fd === undefined) return;
    try {
      if (this.size > 0) writeSync(fd, this.pending.join(""));
      closeSync(fd);
    } catch {
      // a full disk: what could be written is; the result still carries the text
    }
    this.pending = [];
    this.size = 0;
  }
}

export class AgentFiles {
  readonly transcriptPath: string;
  readonly eventsPath: string;
  /** Where stderr goes; the file exists only once something was written to it. */
  readonly errorPath: string;
  private readonly transcript: BufferedFile;
  private readonly events: BufferedFile;
  private readonly stderr: BufferedFile;
  private readonly timer: ReturnType<typeof setInterval>;
  private closing: Promise<void> | undefined;
  /** True while the transcript's last write was streamed text (a heading starts on a new line). */
  private midText = false;
  /** Resolves once the artifact directory exists. */
  readonly dirReady: Promise<unknown>;

  constructor(artifactDir: string) {
    this.transcriptPath = join(artifactDir, TRANSCRIPT);
    this.eventsPath = join(artifactDir, EVENTS_LOG);
    this.errorPath = join(artifactDir, STDERR_LOG);
    this.dirReady = mkdir(artifactDir, { recursive: true });
    this.transcript = new BufferedFile(this.transcriptPath, this.dirReady);
    this.events = new BufferedFile(this.eventsPath, this.dirReady);
    this.stderr = new BufferedFile(this.errorPath, this.dirReady, true);
    this.timer = setInterval(() => this.flush(), FLUSH_MS);
    this.timer.unref?.();
  }

  /** One raw record, as received (a line of JSON, an SSE data payload). */
  raw(line: string): void {
    this.events.write(line.endsWith("\n") ? line : `${line}\n`);
  }

  /** A section of the transcript: "## heading" and a body. */
  section(heading: string, body = ""): void {
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

  diag(line: string): void {
    this.stderr.write(line.endsWith("\n") ? line : `${line}\n`);
  }

  flush(): void {
    this.transcript.flush();
    this.events.flush();
    this.stderr.flush();
  }

  /** Flushes and closes every file (call once the stage's outcome is written). */
  close(): Promise<void> {
    this.closing ??= (async () => {
      clearInterval(this.timer);
      await Promise.all([this.transcript.close(), this.events.close(), this.stderr.close()]);
    })();
    return this.closing;
  }
}

/** The initial user turn: the prompt, preceded by messages sent before the stage started. */
export function firstPrompt(prompt: string, initial: { id: string; text: string }[] | undefined): string {
  if (!initial || initial.length === 0) return prompt;
  const block = initial.map((m) => `- ${m.text}`).join("\n");
  return `Messages received before you started:\n${block}\n\n${prompt}`;
}

/** Writes the final answer to the task's `output` file (relative to cwd). */
export async function writeOutputFile(cwd: string, output: string | undefined, text: string, structured: unknown): Promise<string | undefined> {
  if (!output) return undefined;
  const { resolve, dirname } = await import("node:path");
  const { mkdirSync: mk, writeFileSync } = await import("node:fs");
  const path = resolve(cwd, output);
  mk(dirname(path), { recursive: true });
  writeFileSync(path, structured !== undefined ? `${JSON.stringify(structured, null, 2)}\n` : text);
  return path;
}
