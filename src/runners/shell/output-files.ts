/**
 * A shell stage's stdout and stderr: files the stage process writes itself
 * (its descriptors 1 and 2 are the files, not pipes), read back by the
 * runner for live events and for the result's text.
 *
 * No pipe sits between the stage and its files: nothing to pump through
 * JavaScript, however much the stage prints, and no end-of-pipe to wait
 * for when a background child still holds it. Per stage that is about a
 * third less CPU for the runner than two pipes pumped into the files
 * (bench/pool.ts). While the stage runs, `poll()` (every POLL_MS) reads what
 * was appended since the last look and hands it out as output events; the
 * pool batches those every 250 ms anyway, and `atomic logs --follow` reads
 * the files. `drain()` reads the rest once the process has exited.
 */

import { closeSync, openSync, readSync } from "node:fs";
import { StringDecoder } from "node:string_decoder";

export const POLL_MS = 100;
/** Most bytes read for events in one go (a stage that printed a lot is handed out in pieces). */
const READ_BYTES = 64 * 1024;

export type OutputStream = "stdout" | "stderr";

/** One buffer for every read of this process (reads are synchronous, and each is decoded before the next). */
const readBuffer = Buffer.allocUnsafe(READ_BYTES);

class TailedFile {
  readonly fd: number;
  private offset = 0;
  /** Made on the first bytes read (most short stages print nothing on stderr, many nothing at all). */
  private decoder: StringDecoder | undefined;

  constructor(
    readonly path: string,
    readonly stream: OutputStream,
  ) {
    // Read-write: the stage writes through its copy of the descriptor, this process reads through its own.
    this.fd = openSync(path, "w+");
  }

  /** What was appended since the last read, decoded (a character split across reads waits for its end). */
  read(emit: (stream: OutputStream, text: string) => void): void {
    // Read until the end rather than fstat first: a file with nothing new (most polls, most short stages) costs one read.
    for (;;) {
      let n: number;
      try {
        n = readSync(this.fd, readBuffer, 0, READ_BYTES, this.offset);
      } catch {
        return;
      }
      if (n <= 0) return;
      this.offset += n;
      // The decoder copies a character split across reads into a buffer of its own: the shared one can be reused.
      const text = (this.decoder ??= new StringDecoder("utf8")).write(readBuffer.subarray(0, n));
      if (text) emit(this.stream, text);
    }
  }

  /** The first `limit` bytes of the file (the result's text), once read() has read it all. */
  head(limit: number): string {
    try {
      const size = Math.min(limit, this.offset);
      if (size === 0) return "";
      const buf = Buffer.allocUnsafe(size);
      const n = readSync(this.fd, buf, 0, size, 0);
      return buf.subarray(0, n).toString("utf8");
    } catch {
      return "";
    }
  }

  close(emit: (stream: OutputStream, text: string) => void): void {
    const rest = this.decoder?.end();
    if (rest) emit(this.stream, rest);
    try {
      closeSync(this.fd);
    } catch {
      // already closed
    }
  }
}

export class OutputFiles {
  readonly stdout: TailedFile;
  readonly stderr: TailedFile;
  private timer: ReturnType<typeof setInterval> | undefined;

  constructor(
    outputPath: string,
    errorPath: string,
    private readonly emit: (stream: OutputStream, text: string) => void,
  ) {
    this.stdout = new TailedFile(outputPath, "stdout");
    try {
      this.stderr = new TailedFile(errorPath, "stderr");
    } catch (err) {
      closeSync(this.stdout.fd);
      throw err;
    }
  }

  /** Starts handing out output as it is written, until `drain()`. */
  follow(): void {
    this.timer ??= setInterval(() => this.poll(), POLL_MS);
  }

  poll(): void {
    this.stdout.read(this.emit);
    this.stderr.read(this.emit);
  }

  /** The process has exited: hands out the rest, returns the first `limit` bytes of stdout, closes both files. */
  drain(limit: number): string {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.poll();
    const text = this.stdout.head(limit);
    this.stdout.close(this.emit);
    this.stderr.close(this.emit);
    return text;
  }
}
