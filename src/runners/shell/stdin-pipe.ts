/**
 * A shell stage's stdin: a pipe made with pipe2(2) (libc through bun:ffi,
 * shared/libc.ts). The stage gets its read end; this process keeps the
 * write end and writes messages to it without ever blocking.
 *
 * Why not Bun.spawn's `stdin: "pipe"`: that is a socket pair, two fcntl
 * calls, a writer object and a poll for writability at every spawn, and a
 * wake-up of the event loop when it reports the (empty) pipe writable.
 * Most stages never get a message, and on a pool of short stages that was
 * about a twentieth of the whole run's CPU (bench/pool.ts: makespan -6 %,
 * CPU -5 %, 20 interleaved pairs; spawning alone, about 35 µs per stage).
 *
 * - Both ends are made close-on-exec: only the stage, which gets the read
 *   end as its fd 0, holds it; the read end is closed here once the stage
 *   is spawned, so the stage (and whatever of it reads stdin) sees
 *   end-of-file when `close()` closes the write end.
 * - The write end is non-blocking: what the pipe cannot take now (a stage
 *   that does not read, 64 KiB already waiting) is kept and written again
 *   every RETRY_MS until it goes in or the pipe is closed; a stage that
 *   has exited (EPIPE) or a closed pipe drops it. Messages keep their
 *   order.
 * - Where pipe2 is not to be had (no libc loads), `open` returns
 *   undefined and the runner falls back to Bun's pipe.
 */

import { FFIType, ptr } from "bun:ffi";
import { closeSync, writeSync } from "node:fs";
import { openLibc } from "../../shared/libc.ts";

const O_NONBLOCK = 0o4000;
const O_CLOEXEC = 0o2000000;
const RETRY_MS = 20;

let pipe2: ((fds: Int32Array) => boolean) | undefined | null;

/** pipe2(2) of this process's libc, loaded on first use; null when there is none. */
function loadPipe2(): typeof pipe2 {
  if (pipe2 !== undefined) return pipe2;
  const libc = openLibc({ pipe2: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.i32 } });
  pipe2 = "failure" in libc ? null : (fds) => libc.lib.symbols.pipe2(ptr(fds), O_NONBLOCK | O_CLOEXEC) === 0;
  return pipe2;
}

export class StdinPipe {
  private pending: Buffer[] = [];
  private retry: ReturnType<typeof setTimeout> | undefined;
  private closed = false;

  private constructor(
    /** The stage's end: pass it to Bun.spawn as `stdin`, then call `spawned()`. */
    readonly readFd: number,
    private readonly writeFd: number,
  ) {}

  /** A fresh pipe, or undefined when this process cannot make one (use Bun's `stdin: "pipe"`). */
  static open(): StdinPipe | undefined {
    const make = loadPipe2();
    const fds = new Int32Array(2);
    if (!make || !make(fds)) return undefined;
    return new StdinPipe(fds[0]!, fds[1]!);
  }

  /** The stage has its copy of the read end (or never will): this process's goes. */
  spawned(): void {
    closeSync(this.readFd);
  }

  /** Queued behind what is still waiting; written now as far as the pipe takes it. */
  write(text: string): void {
    if (this.closed) return;
    this.pending.push(Buffer.from(text));
    this.drain();
  }

  /** The stage's stdin ends: what was not written yet is dropped. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.pending = [];
    clearTimeout(this.retry);
    closeSync(this.writeFd);
  }

  private drain(fromTimer = false): void {
    if (fromTimer) this.retry = undefined;
    while (!this.closed && this.pending.length > 0) {
      const head = this.pending[0]!;
      let n: number;
      try {
        n = writeSync(this.writeFd, head);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "EAGAIN") break;
        this.pending = []; // EPIPE: nobody reads any more
        return;
      }
      if (n < head.length) {
        this.pending[0] = head.subarray(n);
        break;
      }
      this.pending.shift();
    }
    if (!this.closed && this.pending.length > 0) this.retry ??= setTimeout(() => this.drain(true), RETRY_MS).unref();
  }
}
