/**
 * The one place the command line writes to stdout and stderr, and the one
 * place it exits.
 *
 * Why: in Bun, stdout and stderr on a pipe are non-blocking, a write the
 * pipe cannot take at once is queued inside the process, and
 * `process.exit()` drops that queue: `atomic show --json | (sleep 1; wc -c)`
 * used to print 65,536 bytes of 1.6 MB. `writableLength` stays 0 and an
 * empty write's callback fires early (measured), so each write here counts
 * itself until its own callback says it left the process; `exit(code)`
 * waits for that count to reach zero, however slow the reader.
 *
 * Backpressure: `write()` returns false when the stream asked us to wait;
 * a command that prints a lot (logs of a 70 MB file) awaits `writeAsync()`,
 * which waits for `drain`, so the process holds one chunk, not the file.
 *
 * A reader that went away (`atomic runs | head -1`): stdout's EPIPE is not
 * an error. Output is dropped from then on and the command ends quietly:
 * a command that only prints exits 0 at once (the reader had all it
 * wanted; no stack, nothing on stderr); a command that drives a run
 * registers `onStdoutClosed`, which stops the run as Ctrl-C would (it stays
 * resumable) and it ends with that run's exit code. A closed stderr drops
 * what is written to it.
 */

type Stream = NodeJS.WriteStream;

/** Writes per stream whose callback has not fired yet. */
const pending = new Map<Stream, number>();
const waiters: (() => void)[] = [];
const closed = new Set<Stream>();
let closedHandler: (() => void) | undefined;
let installed = false;

function idle(): boolean {
  for (const [stream, n] of pending) if (n > 0 && !closed.has(stream)) return false;
  return true;
}

function wakeIfIdle(): void {
  if (idle()) for (const w of waiters.splice(0)) w();
}

/** Watches both streams for a reader that went away; call once at start-up. */
export function installOutput(): void {
  if (installed) return;
  installed = true;
  for (const stream of [process.stdout, process.stderr]) {
    stream.on("error", (err: NodeJS.ErrnoException) => {
      if (err.code !== "EPIPE" && err.code !== "ERR_STREAM_DESTROYED") throw err;
      markClosed(stream);
    });
  }
}

function markClosed(stream: Stream): void {
  if (closed.has(stream)) return;
  closed.add(stream);
  wakeIfIdle();
  if (stream !== process.stdout) return;
  if (closedHandler) closedHandler();
  else void exit(0);
}

/**
 * While `handler` is set, a closed stdout calls it instead of ending the
 * process (the run driver stops its run first). Returns the undo.
 */
export function onStdoutClosed(handler: () => void): () => void {
  closedHandler = handler;
  return () => {
    if (closedHandler === handler) closedHandler = undefined;
  };
}

function put(stream: Stream, text: string): boolean {
  if (closed.has(stream) || text === "") return true;
  pending.set(stream, (pending.get(stream) ?? 0) + 1);
  return stream.write(text, (error) => {
    pending.set(stream, pending.get(stream)! - 1);
    if (error) markClosed(stream);
    wakeIfIdle();
  });
}

/** Writes to stdout; false when the stream asks the writer to wait (see writeAsync). */
export function out(text: string): boolean {
  return put(process.stdout, text);
}

export function err(text: string): void {
  put(process.stderr, text);
}

/** Writes to stdout and resolves once the stream can take more (bounded memory for big outputs). */
export async function writeAsync(text: string): Promise<void> {
  if (out(text)) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      process.stdout.off("drain", done);
      process.stdout.off("close", done);
      clearInterval(check);
      resolve();
    };
    process.stdout.once("drain", done);
    process.stdout.once("close", done);
    // A closed pipe may never emit drain; its write callback marks it closed.
    const check = setInterval(() => closed.has(process.stdout) && done(), 50);
  });
}

/** True once the reader of stdout went away. */
export function stdoutClosed(): boolean {
  return closed.has(process.stdout);
}

/** Resolves when every write so far has left the process (or its stream closed). */
export function flushOutput(): Promise<void> {
  if (idle()) return Promise.resolve();
  return new Promise<void>((resolve) => waiters.push(resolve));
}

let exiting = false;

/** Ends the process with `code` once what was written has been read. */
export async function exit(code: number): Promise<never> {
  if (!exiting) {
    exiting = true;
    await flushOutput();
    process.exit(code);
  }
  return new Promise<never>(() => {});
}
