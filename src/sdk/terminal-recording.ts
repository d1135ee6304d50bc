/**
 * recordTerminal: runs a shell command in a pseudo-terminal (Bun's PTY) and
 * records what it printed as an asciicast v2 file, the format asciinema
 * plays (https://docs.asciinema.org/manual/asciicast/v2/): a header line
 * `{"version": 2, "width", "height", "timestamp", ...}`, then one line per
 * chunk of output, `[seconds since the start, "o", text]`. No library
 * writes the format (asciinema itself is a separate program); it is JSON
 * lines, written here with JSON.stringify.
 *
 * The command sees a terminal (colours, progress bars, as a person would
 * see them) and inherits the calling process's environment. The file is
 * written once the command has ended, in one write (its folder is made
 * before the command starts, so the command may write beside it). Failure semantics: the
 * command's exit code is returned, never thrown; a command that outlives
 * `timeoutMs` or whose `signal` fires has its process killed (SIGKILL) and
 * ends with exit code 124 (timeout) or 130 (aborted), the recording kept
 * up to then. Inside ctx.tool the result is recorded, so a resumed run does
 * not run the command again.
 */

import { mkdirSync } from "node:fs";
import { dirname } from "node:path";

export interface TerminalRecordingOptions {
  /** Working directory of the command. */
  cwd: string;
  /** Where the asciicast v2 file goes (its directory is made). */
  castPath: string;
  /** Terminal size (default 100 x 30). */
  cols?: number;
  rows?: number;
  /** The recording's title in its header. */
  title?: string;
  /** Kill the command after this long (default: none). */
  timeoutMs?: number;
  /** Kill the command when this fires (ctx.tool's signal). */
  signal?: AbortSignal;
}

export interface TerminalRecording {
  exitCode: number;
  /** Everything it printed, terminal escapes included. */
  output: string;
  /** The asciicast v2 file. */
  cast: string;
  /** Seconds from the start to the end. */
  duration: number;
}

/** Runs `command` (`/bin/sh -c`) in a pseudo-terminal and writes what it printed to `castPath` as asciicast v2; its exit code is returned, never thrown. */
export async function recordTerminal(command: string, opts: TerminalRecordingOptions): Promise<TerminalRecording> {
  const cols = opts.cols ?? 100;
  const rows = opts.rows ?? 30;
  // Made first, so the command may write beside its recording.
  mkdirSync(dirname(opts.castPath), { recursive: true });
  const started = performance.now();
  const events: string[] = [];
  let output = "";
  const decoder = new TextDecoder();
  const proc = Bun.spawn(["/bin/sh", "-c", command], {
    cwd: opts.cwd,
    terminal: {
      cols,
      rows,
      data(_terminal, data) {
        const text = decoder.decode(data, { stream: true });
        if (!text) return;
        output += text;
        events.push(JSON.stringify([Number(((performance.now() - started) / 1000).toFixed(6)), "o", text]));
      },
    },
  });
  let stopped: number | undefined;
  const stop = (code: number) => {
    stopped ??= code;
    proc.kill("SIGKILL");
  };
  const timer = opts.timeoutMs ? setTimeout(() => stop(124), opts.timeoutMs) : undefined;
  const onAbort = () => stop(130);
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  if (opts.signal?.aborted) onAbort();
  try {
    const code = await proc.exited;
    // The terminal's last output may still be in flight when the process has exited: closing it flushes it to data().
    proc.terminal?.close();
    const duration = (performance.now() - started) / 1000;
    const header = {
      version: 2,
      width: cols,
      height: rows,
      timestamp: Math.floor(Date.now() / 1000 - duration),
      duration: Number(duration.toFixed(6)),
      command,
      ...(opts.title ? { title: opts.title } : {}),
      env: { TERM: "xterm-256color", SHELL: "/bin/sh" },
    };
    await Bun.write(opts.castPath, [JSON.stringify(header), ...events].join("\n") + "\n");
    return { exitCode: stopped ?? code, output, cast: opts.castPath, duration };
  } finally {
    if (timer) clearTimeout(timer);
    opts.signal?.removeEventListener("abort", onAbort);
  }
}
