/**
 * A started process telling the process that started it, on a pipe, that
 * it has done what the starter waits for: a spawned `atomic run` has
 * recorded its run, `atomic resume` its run_resumed, an intercom broker
 * listens. The starter blocks on the pipe instead of asking the journal or
 * the socket again and again (issue 25: no short polls in place of a
 * blocking wait; docs/design/processes.md "Waiting for a child").
 *
 * The protocol, in full:
 *
 *   starter  spawns the child with the write end of a pipe as the child's
 *            fd READY_FD (node's stdio[3] = "pipe") and ATOMIC_READY_FD
 *            naming it; reads the read end.
 *   child    takes ATOMIC_READY_FD out of its environment when it starts
 *            (`takeReadyFd`, so nothing it starts inherits the name; Bun
 *            closes the fd itself in every process the child spawns), and
 *            when ready writes one line, "ready\n", and closes the fd
 *            (`tellStarter`). A starter that is gone makes the write fail
 *            with EPIPE, which is ignored: the child goes on.
 *   starter  "ready" read: done (`readyLine` resolves "ready"). End of file
 *            without it: the child ended (or closed the fd) without being
 *            ready ("closed"); the starter looks at its exit and its log.
 *
 * One line, once: a child tells at most one starter, at most once.
 */

import { closeSync, writeSync } from "node:fs";
import type { Readable } from "node:stream";
import { takeEnv } from "./config/environment.ts";

/** The child's fd of the pipe: the first after stdin, stdout and stderr. */
export const READY_FD = 3;

const READY_LINE = "ready\n";

/** The child's side: the fd it was given, taken once at its start (undefined: nobody waits). */
let given: number | undefined;

/** Takes ATOMIC_READY_FD out of this process's environment; call once, early, before anything is spawned. */
export function takeReadyFd(): void {
  const text = takeEnv("ATOMIC_READY_FD");
  const fd = text === undefined ? NaN : Number(text);
  if (Number.isInteger(fd) && fd > 2) given = fd;
}

/** Tells the starter this process is ready (once; nothing when no starter waits). */
export function tellStarter(): void {
  const fd = given;
  if (fd === undefined) return;
  given = undefined;
  try {
    writeSync(fd, READY_LINE);
  } catch {
    // the starter is gone (EPIPE): nobody to tell
  }
  try {
    closeSync(fd);
  } catch {
    // already closed
  }
}

/**
 * The starter's side: what a child spawned with `stdio[READY_FD] = "pipe"` said before its end of the pipe
 * closed, or "timeout" when it said nothing within `timeoutMs` (the pipe is let go then).
 */
export function readyLine(pipe: Readable | null | undefined, timeoutMs: number): Promise<"ready" | "closed" | "timeout"> {
  if (!pipe) return Promise.resolve("closed");
  return new Promise((resolve) => {
    let text = "";
    const done = (how: "ready" | "closed" | "timeout") => {
      clearTimeout(timer);
      pipe.removeAllListeners("data");
      pipe.destroy();
      resolve(how);
    };
    const said = () => (text.startsWith(READY_LINE) ? "ready" : "closed");
    const timer = setTimeout(() => done("timeout"), timeoutMs);
    pipe.setEncoding("utf8");
    pipe.on("data", (chunk: string) => {
      text += chunk;
      if (text.includes("\n")) done(said());
    });
    pipe.once("end", () => done(said()));
    pipe.once("error", () => done("closed"));
  });
}
