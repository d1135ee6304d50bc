/**
 * A shell stage's stdout and stderr: files the stage process writes itself
 * (its descriptors 1 and 2 are the files, not pipes), read back by the
 * runner for live events and for the result's text.
 *
 * No pipe sits between the stage and its files: nothing to pump through
 * JavaScript, however much the stage prints, and no end-of-pipe to wait
 * for when a background child still holds it. Per stage that is about a
 * third less CPU for the runner than two pipes pumped into the files
 * (bench/pool.ts). While the stage runs, what was appended since the last
 * look is read and handed out as output events; the pool batches those
 * every 250 ms anyway, and `atomic logs --follow` reads the files.
 * `drain()` reads the rest once the process has exited.
 *
 * Following (`follow()` until `drain()`) is a small state machine, so that
 * a stage that prints nothing for minutes (a build's quiet part, a sleep)
 * costs its worker no wake-up at all:
 *
 * - quiet: both files are watched (fs.watch: inotify), nothing is read, no
 *   timer runs. A change read on either goes to flowing at once.
 * - flowing: the watches are closed and the files are read at once and
 *   then every POLL_MS (a stage that prints a lot is read at that rate, not
 *   once per write, as before the watches). A read that finds nothing new
 *   goes back to quiet: the watches are made first, then the files are read
 *   once more, so a write between the last read and the watch is not lost.
 * - A file that cannot be watched (fs.watch throws) is read every POLL_MS
 *   for the rest of the stage.
 *
 * Output reaches the events at least as soon as the old 100 ms poll gave
 * it: the first bytes after a quiet spell at once, the rest within POLL_MS.
 */

import { closeSync, openSync, readSync, watch, type FSWatcher } from "node:fs";
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

  /** What was appended since the last read, decoded (a character split across reads waits for its end); whether there was any. */
  read(emit: (stream: OutputStream, text: string) => void): boolean {
    // Read until the end rather than fstat first: a file with nothing new (most polls, most short stages) costs one read.
    const from = this.offset;
    for (;;) {
      let n: number;
      try {
        n = readSync(this.fd, readBuffer, 0, READ_BYTES, this.offset);
      } catch {
        return this.offset > from;
      }
      if (n <= 0) return this.offset > from;
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
  private watchers: FSWatcher[] = [];
  private following = false;
  /** A watch could not be made: read every POLL_MS for the rest of the stage. */
  private unwatchable = false;

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

  /** Where following is (the header's states): "quiet" costs no timer and no read. */
  get state(): "idle" | "quiet" | "flowing" | "polling" {
    if (!this.following) return "idle";
    if (this.unwatchable) return "polling";
    return this.watchers.length > 0 ? "quiet" : "flowing";
  }

  /** Starts handing out output as it is written, until `drain()`. */
  follow(): void {
    if (this.following) return;
    this.following = true;
    this.quiet();
  }

  /** Reads both files; whether either had anything new. */
  poll(): boolean {
    const out = this.stdout.read(this.emit);
    return this.stderr.read(this.emit) || out;
  }

  /** Watches both files (or, where that fails, reads them every POLL_MS for good); reads once more after the watch is made. */
  private quiet(): void {
    if (!this.following) return;
    try {
      for (const file of [this.stdout, this.stderr]) this.watchers.push(watch(file.path, () => this.flowing()));
    } catch {
      this.unwatch();
      this.unwatchable = true;
      this.timer = setInterval(() => this.poll(), POLL_MS);
      return;
    }
    // After the caller's turn: the runner says "started" right after follow(), and no output may come before it.
    queueMicrotask(() => {
      if (this.following && this.watchers.length > 0 && this.poll()) this.flowing(false);
    });
  }

  /** Reads every POLL_MS (the first at once when `readNow`) until a read finds nothing. */
  private flowing(readNow = true): void {
    if (!this.following || this.timer) return;
    this.unwatch();
    if (readNow) this.poll();
    this.timer = setInterval(() => {
      if (this.poll()) return;
      clearInterval(this.timer);
      this.timer = undefined;
      this.quiet();
    }, POLL_MS);
  }

  private unwatch(): void {
    for (const w of this.watchers) w.close();
    this.watchers = [];
  }

  /** The process has exited: hands out the rest, returns the first `limit` bytes of stdout, closes both files. */
  drain(limit: number): string {
    this.following = false;
    this.unwatch();
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.poll();
    const text = this.stdout.head(limit);
    this.stdout.close(this.emit);
    this.stderr.close(this.emit);
    return text;
  }
}
