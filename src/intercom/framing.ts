/**
 * Frames on an intercom socket: a 4-byte big-endian length, then that many
 * bytes of UTF-8 JSON. A length of 0 or above the limit, or bytes that do
 * not decode to JSON, make the decoder report an error; the
 * caller answers with an error frame and closes the connection (after an
 * oversized length nothing that follows can be trusted as a frame
 * boundary, so the decoder stops).
 *
 * Writes go through `FrameWriter`, which sends the frames written during one
 * turn of the event loop in one write (fewer system calls when a burst goes
 * to one peer), keeps what the socket did not take (Bun's socket `write`
 * may be partial) and flushes it on `drain`.
 */

import { MAX_FRAME_BYTES } from "./protocol/index.ts";

const HEADER = 4;

export type Decoded =
  | { ok: true; value: unknown }
  | { ok: false; code: "frame_too_large" | "bad_frame"; message: string };

export function encodeFrame(value: unknown, limit = MAX_FRAME_BYTES): Uint8Array {
  // Buffer's native UTF-8 write into a pooled allocation: measured cheaper than TextEncoder + DataView on the round-trip path.
  const text = JSON.stringify(value);
  const length = Buffer.byteLength(text);
  if (length > limit) throw new RangeError(`a frame of ${length} bytes is over the limit of ${limit}`);
  const out = Buffer.allocUnsafe(HEADER + length);
  out.writeUInt32BE(length, 0);
  out.write(text, HEADER, "utf8");
  return out;
}

export class FrameDecoder {
  #buf: Buffer = Buffer.alloc(0);
  #start = 0;
  #end = 0;
  /** True when #buf is our own copy (a chunk handed to us by the socket must not be written into, nor kept). */
  #owned = false;
  #failed = false;

  constructor(private readonly limit = MAX_FRAME_BYTES) {}

  /** Bytes received but not yet decoded (a half frame). */
  get pending(): number {
    return this.#end - this.#start;
  }

  /** Appends a chunk and returns every whole frame in it, in order (an error ends the list for good). */
  push(chunk: Uint8Array): Decoded[] {
    if (this.#failed) return [];
    this.#append(chunk);
    const out: Decoded[] = [];
    while (this.#end - this.#start >= HEADER) {
      const b = this.#buf;
      const s = this.#start;
      const length = b.readUInt32BE(s);
      if (length === 0 || length > this.limit) {
        this.#failed = true;
        out.push(
          length === 0
            ? { ok: false, code: "bad_frame", message: "a frame of length 0" }
            : { ok: false, code: "frame_too_large", message: `a frame of ${length} bytes is over the limit of ${this.limit}` },
        );
        return out;
      }
      if (this.#end - s - HEADER < length) break;
      this.#start = s + HEADER + length;
      let value: unknown;
      try {
        // Bytes that are not UTF-8 decode to U+FFFD; where that breaks the JSON, the frame is refused.
        value = JSON.parse(b.toString("utf8", s + HEADER, s + HEADER + length));
      } catch (err) {
        this.#failed = true;
        out.push({ ok: false, code: "bad_frame", message: `a frame that is not JSON (${(err as Error).message})` });
        return out;
      }
      out.push({ ok: true, value });
    }
    if (this.#start === this.#end) {
      this.#start = this.#end = 0;
    } else if (!this.#owned) {
      // A half frame left in the socket's chunk: keep our own copy (the socket may reuse its buffer).
      this.#keep(this.#buf.subarray(this.#start, this.#end), 0);
    }
    return out;
  }

  #append(chunk: Uint8Array): void {
    if (this.#start === this.#end && chunk.length >= HEADER) {
      // Nothing pending: decode straight from the chunk (the common case, no copy).
      this.#buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      this.#owned = false;
      this.#start = 0;
      this.#end = chunk.length;
      return;
    }
    const pending = this.#buf.subarray(this.#start, this.#end);
    if (this.#owned && this.#buf.length - this.#end >= chunk.length) {
      this.#buf.set(chunk, this.#end);
      this.#end += chunk.length;
      return;
    }
    this.#keep(pending, chunk.length);
    this.#buf.set(chunk, this.#end);
    this.#end += chunk.length;
  }

  /** Moves `pending` to the front of an owned buffer with room for `more` bytes after it (reusing the old one when it fits). */
  #keep(pending: Buffer, more: number): void {
    const need = pending.length + more;
    if (this.#owned && this.#buf.length >= need) {
      this.#buf.copy(this.#buf, 0, this.#start, this.#end);
    } else {
      const next = Buffer.allocUnsafe(Math.max(need, 4096));
      pending.copy(next, 0);
      this.#buf = next;
      this.#owned = true;
    }
    this.#start = 0;
    this.#end = pending.length;
  }
}

/** The socket surface a FrameWriter needs (Bun's `Socket` has it). */
export interface WritableSocket {
  write(data: Uint8Array): number;
  end(): void;
}

export class FrameWriter {
  /** Frames written during this turn of the event loop (JSON text, or encoded frames): sent together in one write when it ends (cork). */
  #corked: (string | Uint8Array)[] = [];
  #corkedBytes = 0;
  #queue: Uint8Array[] = [];
  #queuedBytes = 0;
  #closing = false;
  #flushScheduled = false;

  constructor(
    private readonly socket: WritableSocket,
    private readonly limit = MAX_FRAME_BYTES,
  ) {}

  /** Bytes waiting to go out (corked, or waiting for the socket to drain). */
  get backlog(): number {
    return this.#corkedBytes + this.#queuedBytes;
  }

  /** An encoded frame (encodeFrame). */
  write(frame: Uint8Array): void {
    this.#corked.push(frame);
    this.#corkedBytes += frame.length;
    this.#schedule();
  }

  /**
   * A value as a frame: encoded at flush time, together with the rest of
   * this turn's frames (one allocation). False (nothing written) when it is
   * over the frame limit.
   */
  writeJson(value: unknown): boolean {
    const text = JSON.stringify(value);
    const length = Buffer.byteLength(text);
    if (length > this.limit) return false;
    this.#corked.push(text);
    this.#corkedBytes += HEADER + length;
    this.#schedule();
    return true;
  }

  /** Call from the socket's `drain` handler. */
  drain(): void {
    while (this.#queue.length > 0) {
      const head = this.#queue[0]!;
      const n = this.socket.write(head);
      if (n < head.length) {
        this.#queue[0] = head.subarray(Math.max(0, n));
        this.#queuedBytes -= Math.max(0, n);
        return;
      }
      this.#queue.shift();
      this.#queuedBytes -= head.length;
    }
    if (this.#closing) this.socket.end();
  }

  /** Ends the connection once everything written so far has gone out. */
  end(): void {
    this.#closing = true;
    this.#flush();
    if (this.#queue.length === 0) this.socket.end();
  }

  #schedule(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    queueMicrotask(() => this.#flush());
  }

  #flush(): void {
    this.#flushScheduled = false;
    if (this.#corked.length === 0) return;
    const items = this.#corked;
    const data = items.length === 1 && typeof items[0] !== "string" ? items[0]! : pack(items, this.#corkedBytes);
    this.#corked = [];
    this.#corkedBytes = 0;
    if (this.#queue.length > 0) {
      this.#queue.push(data);
      this.#queuedBytes += data.length;
      return;
    }
    const n = this.socket.write(data);
    if (n < data.length) {
      const rest = data.subarray(Math.max(0, n));
      this.#queue.push(rest);
      this.#queuedBytes += rest.length;
    }
  }
}

/** One buffer holding every corked frame: JSON texts get their length header here. */
function pack(items: (string | Uint8Array)[], size: number): Uint8Array {
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const item of items) {
    if (typeof item === "string") {
      const n = out.write(item, at + HEADER, "utf8");
      out.writeUInt32BE(n, at);
      at += HEADER + n;
    } else {
      out.set(item, at);
      at += item.length;
    }
  }
  return out;
}

