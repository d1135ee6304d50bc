/**
 * Where stages execute. The engine hands a `StageRequest` (plain data) to a
 * `StageExecutor` and gets a `StageResult` back. In this version stages run
 * in the root process (`InProcessExecutor`); the worker pool implements the
 * same interface by shipping the request to a worker.
 */

import type { StageResult } from "../sdk/types.ts";
import { getRunner } from "../runners/registry.ts";
import type { RunnerEvent, StageRequest } from "../runners/types.ts";

export interface StageExecutor {
  execute(request: StageRequest, signal: AbortSignal, onEvent: (event: RunnerEvent) => void): Promise<StageResult>;
  close(): Promise<void>;
}

export class InProcessExecutor implements StageExecutor {
  async execute(request: StageRequest, signal: AbortSignal, onEvent: (event: RunnerEvent) => void): Promise<StageResult> {
    const handle = getRunner(request.runner).start(request, onEvent);
    const onAbort = () => handle.cancel(String(signal.reason ?? "cancelled"));
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    try {
      return await handle.result;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  async close(): Promise<void> {}
}
