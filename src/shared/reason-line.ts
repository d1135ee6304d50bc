/**
 * reasonLine: the line of a failed process's stderr log that a failure
 * sentence quotes (sdk/capture-stage.ts). Its last line that says why, cut
 * at `max` characters: what a runtime prints around an uncaught error is
 * skipped (indented lines: the error's properties, stack frames, the caret;
 * the numbered source excerpt; Bun's version line), so a crash of Bun reads
 * as its `error: …` line. Only the log's last 8 KB are read, without
 * following a link; "" when there is no such line or no file.
 */

import { closeSync, constants, openSync } from "node:fs";
import { readTail } from "./file-tail.ts";

const TAIL_BYTES = 8 * 1024;
const NOISE = /^(\s|\d+\s*\||Bun v\d|[}\]]\s*$)/;

export function reasonLine(path: string | undefined, max = 200): string {
  if (!path) return "";
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return "";
  }
  try {
    const line = readTail(fd, TAIL_BYTES).text.split(/\r?\n/).findLast((l) => l.trim() !== "" && !NOISE.test(l)) ?? "";
    return line.length > max ? `${line.slice(0, max - 1)}…` : line;
  } catch {
    return "";
  } finally {
    closeSync(fd);
  }
}
