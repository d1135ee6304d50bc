/**
 * The shell runner: a stage is `/bin/sh -c <command>` in its own process
 * group. stdout and stderr are written to files in the attempt's artifact
 * directory as they arrive (so `atomic logs --follow` can tail them) and
 * streamed as events. A message is written to the stage's stdin as a line
 * (steer and followUp alike: a shell has no turns; an "interrupt" message
 * sends SIGINT to the group first); messages sent before the stage started
 * (request.initialMessages) are written before anything else. interrupt()
 * sends SIGINT to the group; cancel and timeout send SIGTERM, then SIGKILL
 * after a grace period.
 *
 * Success is exit code 0. The result's `text` is stdout, capped at
 * TEXT_LIMIT bytes (the journal keeps the text; the file keeps everything).
 */

import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { StageResult } from "../../sdk/types.ts";
import type { DeliveryMode, Runner, RunnerEvent, RunnerHandle, StageRequest } from "../types.ts";
import { killGroup, trackGroup, untrackGroup } from "./process-groups.ts";

export const TEXT_LIMIT = 64 * 1024;
const KILL_GRACE_MS = 2_000;

export class ShellRunner implements Runner {
  readonly kind = "shell";

  start(request: StageRequest, onEvent: (event: RunnerEvent) => void): RunnerHandle {
    mkdirSync(request.artifactDir, { recursive: true });
    const outputPath = join(request.artifactDir, "stdout.log");
    const errorPath = join(request.artifactDir, "stderr.log");
    const outFd = openSync(outputPath, "w");
    const errFd = openSync(errorPath, "w");
    let stopReason: "cancelled" | "timeout" | undefined;
    let cancelMessage = "";

    const child = spawn("/bin/sh", ["-c", request.command ?? ""], {
      cwd: request.cwd,
      env: {
        ...process.env,
        ...request.env,
        ATOMIC_RUN_ID: request.runId,
        ATOMIC_STAGE: request.stageName,
        ATOMIC_STAGE_KEY: request.stageKey,
        ATOMIC_ATTEMPT: String(request.attempt),
      },
      detached: true,
      stdio: ["pipe", "pipe", "pipe"],
    });
    const pid = child.pid;
    if (pid !== undefined) trackGroup(pid);
    child.stdin?.on("error", () => {}); // the stage may exit without reading its stdin
    // Messages sent before the stage started: the first thing on its stdin, in order.
    for (const m of request.initialMessages ?? []) child.stdin?.write(asLine(m.text));
    let exited = false;
    child.on("exit", () => (exited = true));

    const chunks: Buffer[] = [];
    let captured = 0;
    child.stdout?.on("data", (chunk: Buffer) => {
      writeSync(outFd, chunk);
      if (captured < TEXT_LIMIT) {
        chunks.push(chunk);
        captured += chunk.length;
      }
      onEvent({ type: "output", stream: "stdout", text: chunk.toString("utf8") });
    });
    child.stderr?.on("data", (chunk: Buffer) => {
      writeSync(errFd, chunk);
      onEvent({ type: "output", stream: "stderr", text: chunk.toString("utf8") });
    });

    const stop = (reason: "cancelled" | "timeout", message: string) => {
      if (stopReason || pid === undefined) return;
      stopReason = reason;
      cancelMessage = message;
      killGroup(pid, "SIGTERM");
      setTimeout(() => killGroup(pid, "SIGKILL"), KILL_GRACE_MS).unref();
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
        if (pid !== undefined) untrackGroup(pid);
        closeSync(outFd);
        closeSync(errFd);
        const text = Buffer.concat(chunks).subarray(0, TEXT_LIMIT).toString("utf8");
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
      child.on("error", (err) => finish(null, err));
      // Background children of the stage must not outlive it (nor hold its pipes open).
      child.on("exit", () => {
        if (pid !== undefined) killGroup(pid, "SIGKILL");
      });
      // "close" waits for stdout/stderr to end, so every byte is in the files.
      child.on("close", (code, signal) => finish(code ?? (signal ? 128 + signalNumber(signal) : null)));
    });

    onEvent({ type: "started", pid });

    return {
      result,
      send: async (message: string, mode: DeliveryMode) => {
        if (exited || !child.stdin || child.stdin.destroyed) throw new Error("the stage has ended");
        // A shell has no turns: steer and followUp both go to stdin; interrupt ends the current work first.
        if (mode === "interrupt" && pid !== undefined) killGroup(pid, "SIGINT");
        child.stdin.write(asLine(message));
      },
      interrupt: () => {
        if (pid !== undefined) killGroup(pid, "SIGINT");
      },
      cancel: (reason = "cancelled") => stop("cancelled", reason),
    };
  }
}

function asLine(text: string): string {
  return text.endsWith("\n") ? text : `${text}\n`;
}

function signalNumber(signal: NodeJS.Signals): number {
  const table: Partial<Record<NodeJS.Signals, number>> = { SIGINT: 2, SIGKILL: 9, SIGTERM: 15, SIGHUP: 1 };
  return table[signal] ?? 0;
}
