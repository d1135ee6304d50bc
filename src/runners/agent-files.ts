/**
 * The files an agent stage leaves in its attempt's artifact directory:
 *
 * - `events.jsonl`: the raw event stream, one record per line, written
 *   BEFORE it is parsed (a parser bug never loses what the agent said);
 * - `transcript.md`: a readable transcript (prompt, assistant text, tool
 *   calls and results, messages received, the outcome);
 * - `stdout.log`: a symlink to transcript.md, so `atomic logs`, `--follow`
 *   and the status page read agent stages like shell stages;
 * - `stderr.log`: the agent's stderr and the runner's diagnostics.
 *
 * Writes are buffered (flushed at 16 KiB and every 200 ms) so a stage
 * streaming tens of thousands of deltas costs a few hundred syscalls and a
 * bounded amount of memory; `close()` flushes everything. The directory and
 * files are created in the background (off the first request's critical
 * path: creating four files costs about as much as two model turns against
 * a local server, several on a busy disk); what is written meanwhile waits
 * in the buffer. The files are plain descriptors, written and closed
 * synchronously (a small write or a close costs less than a hop through
 * the thread pool, and a stage's end then waits on none).
 */

import { closeSync, open, writeSync } from "node:fs";
import { mkdir, symlink } from "node:fs/promises";
import { join } from "node:path";

const FLUSH_BYTES = 16 * 1024;
const FLUSH_MS = 200;

class BufferedFile {
  private fd: number | undefined;
  private readonly ready: Promise<void>;
  private closed = false;
  private pending: string[] = [];
  private size = 0;
  constructor(
    readonly path: string,
    dirReady: Promise<unknown>,
  ) {
    this.ready = dirReady.then(
      () =>
        new Promise<void>((resolve) => {
          open(path, "w", (err, fd) => {
            // an error (no artifact directory): the stage still runs; its result carries the text
            if (!err) this.fd = fd;
            resolve();
          });
        }),
      () => {},
    );
  }
  write(text: string): void {
    if (this.closed || text.length === 0) return;
    this.pending.push(text);
    this.size += text.length;
    if (this.size >= FLUSH_BYTES) this.flush();
  }
  flush(): void {
    if (this.fd === undefined || this.size === 0) return;
    const text = this.pending.join("");
    this.pending = [];
    this.size = 0;
    try {
      writeSync(this.fd, text);
    } catch {
      // a full disk must not take the stage down; the result still carries the text
    }
  }
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.ready;
    this.flush();
    const fd = this.fd;
    this.fd = undefined;
    if (fd !== undefined) {
      try {
        closeSync(fd);
      } catch {
        // nothing left to lose: everything was written
      }
    }
  }
}

export class AgentFiles {
  readonly transcriptPath: string;
  readonly eventsPath: string;
  readonly errorPath: string;
  private readonly transcript: BufferedFile;
  private readonly events: BufferedFile;
  private readonly stderr: BufferedFile;
  private readonly timer: ReturnType<typeof setInterval>;
  /** The stdout.log link (made alongside the files, awaited by close). */
  private readonly linked: Promise<unknown>;
  private closing: Promise<void> | undefined;
  /** True while the transcript's last write was streamed text (a heading starts on a new line). */
  private midText = false;
  /** Resolves once the artifact directory exists. */
  readonly dirReady: Promise<unknown>;

  constructor(artifactDir: string) {
    this.transcriptPath = join(artifactDir, "transcript.md");
    this.eventsPath = join(artifactDir, "events.jsonl");
    this.errorPath = join(artifactDir, "stderr.log");
    this.dirReady = mkdir(artifactDir, { recursive: true });
    this.linked = this.dirReady.then(
      // an existing link (an earlier attempt in the same directory) is harmless
      () => symlink("transcript.md", join(artifactDir, "stdout.log")).catch(() => {}),
      () => {},
    );
    this.transcript = new BufferedFile(this.transcriptPath, this.dirReady);
    this.events = new BufferedFile(this.eventsPath, this.dirReady);
    this.stderr = new BufferedFile(this.errorPath, this.dirReady);
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
      await Promise.all([this.transcript.close(), this.events.close(), this.stderr.close(), this.linked]);
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
