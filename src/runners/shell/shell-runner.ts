/**
 * The shell runner: a stage is `/bin/sh -c <command>`, or the program of
 * its argv form with its arguments (no shell), in its own process group. Its stdout and stderr are files in the attempt's artifact
 * directory, written by the stage itself (`atomic logs --follow` tails
 * them), and read back as output events while it runs (output-files.ts).
 * A message is written to the stage's stdin (Bun's stdin pipe) as a line
 * (steer and followUp alike: a shell has no turns; an "interrupt" message
 * sends SIGINT to the group first); messages sent before the stage started
 * (request.initialMessages) are written before anything else. interrupt()
 * sends SIGINT to the group; cancel and timeout send SIGTERM, then SIGKILL
 * after a grace period (stage-stop.ts; in a sandbox the SIGTERM goes to the
 * processes inside, not to bwrap, so the stage's traps run).
 *
 * Success is exit code 0. The result's `text` is stdout, capped at
 * TEXT_LIMIT bytes (the journal keeps the text; the file keeps everything).
 */

import { STDERR_LOG, STDOUT_LOG } from "../../artifacts/stage-logs.ts";
import type { Subprocess } from "bun";
import { mkdirSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { StageResult } from "../../sdk/types.ts";
import type { DeliveryMode, Runner, RunnerEvent, RunnerHandle, StageRequest } from "../types.ts";
import { OutputFiles } from "./output-files.ts";
import { stageEnv } from "../stage-env.ts";
import { killGroup, trackGroup, untrackGroup } from "./process-groups.ts";
import { spawnWithUserUmask } from "../../shared/private-files.ts";
import { sandboxed, type Sandboxed } from "../sandbox/launch.ts";
import { stageProcesses } from "./process-tree.ts";
import { stopWithGrace } from "./stage-stop.ts";

export const TEXT_LIMIT = 64 * 1024;

export class ShellRunner implements Runner {
  readonly kind = "shell";

  start(request: StageRequest, onEvent: (event: RunnerEvent) => void): RunnerHandle {
    mkdirSync(request.artifactDir, { recursive: true });
    const outputPath = join(request.artifactDir, STDOUT_LOG);
    const errorPath = join(request.artifactDir, STDERR_LOG);
    const output = new OutputFiles(outputPath, errorPath, (stream, text) => onEvent({ type: "output", stream, text }));
    let stopReason: "cancelled" | "timeout" | undefined;
    let cancelMessage = "";

    // Bun.spawn rather than node:child_process: about half the CPU per stage (no stream wrappers, no per-variable env checks).
    let child: Subprocess<"pipe", number, number> | undefined;
    let spawnError: Error | undefined;
    let exited = false;
    let pid: number | undefined;
    let box: Sandboxed | undefined;
    try {
      // The argv form runs the program itself, no shell: each element is one argument, as is (sdk/shell.ts).
      const argv = request.argv ?? ["/bin/sh", "-c", request.command ?? ""];
      // A sandboxed stage runs inside bubblewrap (runners/sandbox/launch.ts); its group is bwrap's.
      // What the provider gate tells the stage of a provider it cannot reach goes to its stderr too (quoted by its failure).
      const sandbox = sandboxed(request, argv, stageEnv(request), {}, (sentence) => noteOnStderr(output.stderr.fd, sentence));
      box = sandbox;
      child = spawnWithUserUmask(() => Bun.spawn(sandbox.argv, {
        cwd: request.cwd,
        env: sandbox.env,
        detached: true,
        stdin: "pipe",
        stdout: output.stdout.fd,
        stderr: output.stderr.fd,
        onExit: () => {
          exited = true;
          // Background children of the stage must not outlive it (nor keep writing to its files).
          if (pid !== undefined) killGroup(pid, "SIGKILL");
        },
      }));
    } catch (err) {
      spawnError = err instanceof Error ? err : new Error(String(err));
    }
    pid = child?.pid;
    if (pid !== undefined) trackGroup(pid);
    const stdin = stageStdin(child);
    const writeStdin = (text: string) => stdin.write(text);
    // Messages sent before the stage started: the first thing on its stdin, in order.
    for (const m of request.initialMessages ?? []) writeStdin(asLine(m.text));

    if (child) output.follow();

    const inSandbox = request.sandbox !== undefined;
    const stop = (reason: "cancelled" | "timeout", message: string) => {
      if (stopReason || pid === undefined) return;
      stopReason = reason;
      cancelMessage = message;
      // Unsandboxed, the group is the stage; sandboxed, bwrap leads it and its descendants are the stage (stage-stop.ts).
      stopWithGrace({ pid, sandboxed: inSandbox, exited: () => exited, others: () => (inSandbox ? stageProcesses(pid) : []) });
    };
    const timer =
      request.timeoutMs && request.timeoutMs > 0
        ? setTimeout(() => stop("timeout", `timed out after ${request.timeoutMs} ms`), request.timeoutMs)
        : undefined;

    const result = new Promise<StageResult>((resolve) => {
      let settled = false;
      const finish = (exitCode: number | null, spawnError?: Error) => {
        if (settled) return;
        settled = true;
        if (timer) clearTimeout(timer);
        // Bun may settle `exited` before it calls onExit: the group goes here too, before the result is seen
        // (a worker then checks that nothing of the stage is left: pool/leftovers.ts).
        if (pid !== undefined) {
          killGroup(pid, "SIGKILL");
          untrackGroup(pid);
        }
        box?.close();
        stdin.close();
        const text = output.drain(TEXT_LIMIT);
        const base = { text, exitCode, outputPath, errorPath };
        if (spawnError) {
          resolve({ ...base, status: "failed", error: { code: "spawn_failed", message: spawnError.message } });
        } else if (stopReason === "cancelled") {
          resolve({ ...base, status: "cancelled", error: { code: "cancelled", message: cancelMessage } });
        } else if (stopReason === "timeout") {
          resolve({ ...base, status: "failed", error: { code: "timeout", message: cancelMessage } });
        } else if (exitCode === 0) {
          resolve({ ...base, status: "completed" });
        } else {
          resolve({
            ...base,
            status: "failed",
            error: { code: "exit_code", message: `exited with code ${exitCode ?? "null"}` },
          });
        }
      };
      if (!child) {
        queueMicrotask(() => finish(null, spawnError));
        return;
      }
      const proc = child;
      // The stage writes its files itself: once it has exited, every byte it wrote is in them.
      void proc.exited.then(() => {
        const signal = proc.signalCode;
        finish(proc.exitCode ?? (typeof signal === "number" ? 128 + signal : signal ? 128 + signalNumber(signal) : null));
      });
    });

    onEvent({ type: "started", pid });

    return {
      result,
      send: async (message: string, mode: DeliveryMode) => {
        if (exited || !child) throw new Error("the stage has ended");
        // A shell has no turns: steer and followUp both go to stdin; interrupt ends the current work first.
        if (mode === "interrupt" && pid !== undefined) killGroup(pid, "SIGINT");
        writeStdin(asLine(message));
      },
      interrupt: () => {
        if (pid !== undefined) killGroup(pid, "SIGINT");
      },
      cancel: (reason = "cancelled") => stop("cancelled", reason),
    };
  }
}

/**
 * The stage's stdin (Bun's pipe, a FileSink): writes are buffered and never
 * block, whether or not the stage reads; a stage that has closed its stdin
 * or exited makes them fail quietly. `close` ends it (end-of-file).
 */
function stageStdin(child: Subprocess<"pipe", number, number> | undefined): { write(text: string): void; close(): void } {
  const sink = child?.stdin;
  return {
    write(text) {
      try {
        sink?.write(text);
        void Promise.resolve(sink?.flush()).catch(() => {}); // the stage may exit without reading its stdin
      } catch {
        // likewise
      }
    },
    close() {
      try {
        void Promise.resolve(sink?.end()).catch(() => {});
      } catch {
        // already closed
      }
    },
  };
}

/** A line of atomic's own on the stage's stderr file, where the stage's next write goes (the stage shares the descriptor's offset). */
function noteOnStderr(fd: number, sentence: string): void {
  try {
    writeSync(fd, `${sentence}\n`);
  } catch {
    // the stage has ended and its file is closed
  }
}

function asLine(text: string): string {
  return text.endsWith("\n") ? text : `${text}\n`;
}

function signalNumber(signal: NodeJS.Signals): number {
  const table: Partial<Record<NodeJS.Signals, number>> = { SIGINT: 2, SIGKILL: 9, SIGTERM: 15, SIGHUP: 1 };
  return table[signal] ?? 0;
}
