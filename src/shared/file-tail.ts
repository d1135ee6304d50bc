/**
 * readTail: the last `maxBytes` of an open file as text, for the failure
 * messages that quote a log's end (artifacts/stage-logs.ts tailLines,
 * reason-line.ts). Bounded for any file; the caller opens the file (how it
 * refuses links is its own) and closes it. `cut` says whether the file had
 * more before that, so its first line may be partial.
 */

import { fstatSync, readSync } from "node:fs";

export function readTail(fd: number, maxBytes: number): { text: string; cut: boolean } {
  const size = fstatSync(fd).size;
  const length = Math.min(size, maxBytes);
  const buf = Buffer.alloc(length);
  readSync(fd, buf, 0, length, size - length);
  return { text: buf.toString("utf8"), cut: length < size };
}
