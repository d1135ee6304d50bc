/**
 * Log lines for the internal roles (pool coordinator, workers, intercom
 * broker), written straight to file descriptor 2.
 *
 * Not `process.stderr`: in Bun that is a node stream built on first use,
 * and building it loads the node:stream machinery, which costs about 9 ms
 * of CPU per process (a bare `bun` process: 4.5 ms without touching it,
 * 13 ms with). A pool starts five processes at once while the root records
 * the first stages, so that was some 45 ms of CPU at the start of every
 * run. A synchronous write is also what a log wants: the line is in the
 * file before the next statement, even if a SIGKILL follows (the
 * coordinator quotes a lost worker's last lines from that file).
 *
 * A non-blocking pipe that is full (EAGAIN) is waited for, a millisecond
 * at a time, up to a second; other errors (a closed descriptor) drop the
 * line: a log line is never worth failing for. Known secret values are
 * redacted from every line (shared/secrets.ts).
 */

import { writeSync } from "node:fs";
import { sleepSync } from "./sleep-sync.ts";
import { redact } from "./secrets.ts";

const EAGAIN_WAIT_MS = 1_000;

export function writeStderr(text: string): void {
  let bytes = Buffer.from(redact(text));
  let waited = 0;
  while (bytes.length > 0) {
    try {
      bytes = bytes.subarray(writeSync(2, bytes));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EAGAIN" || waited >= EAGAIN_WAIT_MS) return;
      sleepSync(1);
      waited++;
    }
  }
}
