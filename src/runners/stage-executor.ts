/**
 * Where stages execute. The engine hands a `StageRequest` (plain data) to a
 * `StageExecutor` and gets a `StageResult` back: in the root process
 * (`InProcessExecutor`, `atomic run --in-process`), or on the worker pool
 * (src/pool/pool-executor.ts, the default), which ships the request to a
 * worker process through the journal's work queue.
 *
 * The port lives here, below engine/ and pool/, so that the engine and
 * the executors that run its stages elsewhere (pool/, fleet/) depend on it
 * and not on each other (docs/design/layers.md).
 */

import type { StageResult } from "../sdk/types.ts";
import { getRunner } from "./registry.ts";
import type { DeliveryMode, RunnerEvent, RunnerHandle, StageRequest, WrapUpReason } from "./types.ts";

/**
 * The abort reason that cancels a queued stage only: one a worker already
 * runs goes on (the budget ran out: what runs may finish, nothing more starts).
 */
export const CANCEL_IF_QUEUED = "cancel-if-queued: the budget is used up";

/** The driver's side of a run tool call (engine/mail/stage-tools.ts): the stage's credential, the tool, its arguments. */
export type StageToolsHandler = (token: string, tool: string, args: Record<string, unknown>) => Promise<{ ok: boolean; output: string }>;

export interface StageExecutor {
  /** True when stages go through the work queue: the stage step enqueues `request.workId` with its start record. */
  readonly queued: boolean;
  /**
   * The pool protocol version a queued executor speaks: the stage step
   * stamps it on the request (StageRequest.protocol) so that a worker host
   * of another version refuses the work item. Set by every queued executor.
   */
  readonly protocol?: number;
  execute(request: StageRequest, signal: AbortSignal, onEvent: (event: RunnerEvent) => void): Promise<StageResult>;
  /**
   * The queue a stage waits on when only worker hosts can run it (no worker of the root's own serves
   * that queue): recorded with its start, so readers can say why it waits (journal/fleet-view.ts).
   */
  hostQueue?(request: StageRequest): string | undefined;
  /**
   * True when this executor answers the stage itself rather than with its
   * runner (the test kit's scripted agents, src/testing/): the runner's own
   * requirements (an API key, a program on PATH) are then not checked.
   */
  answers?(stage: { name: string; runner: string; runId: string }): boolean;
  /** A stage is about to be recorded and executed: start whatever is slow to start (it must not throw). */
  prepare?(): void;
  /** Apply a control revision (pause/unpause) wherever stages run; resolves once it is acknowledged. */
  applyControl?(rev: number, paused: boolean): Promise<void>;
  /**
   * Hand a message to a running stage attempt (its runner's `send`):
   * "not_running" when no attempt of that stage runs here (not started yet,
   * or ended); the engine then keeps the message queued.
   */
  deliver?(stage: { runId: string; stageKey: string }, message: { id: string; text: string }, mode: DeliveryMode): Promise<"delivered" | "not_running">;
  /** The budget ran out: wrap up a running agent stage (RunnerHandle.wrapUp; `reason`: which limit). */
  wrapUp?(stage: { runId: string; stageKey: string }, text: string, reason: WrapUpReason): Promise<void>;
  /** The stage was paused (or unpaused): its running attempt holds after its current turn, or goes on (RunnerHandle.hold). */
  holdStage?(stage: { runId: string; stageKey: string }, held: boolean): Promise<void>;
  /**
   * The root counted the result of a budgeted attempt (StageRequest.budgeted: `workId`), or its
   * budget ran out (no `workId`): a pool that held its claims for it goes on, or, `exhausted`,
   * claims nothing more of this drive.
   */
  budgetCounted?(workId: string | undefined, exhausted: boolean): void;
  /**
   * The run's driver acts on its stages' run tool calls (message, ask_agent, reply, ask_user); an executor
   * whose stages cannot reach the driver's intercom session (worker hosts: fleet/tools-relay.ts) carries
   * their calls to `handle` and the results back.
   */
  serveStageTools?(handle: StageToolsHandler): void;
  /**
   * The root is stopping (SIGTERM, Ctrl-C): other processes of this executor that wait for an unreachable
   * journal stop waiting, as the root does (Journal.stopWaiting), so the stages' results come back at once.
   */
  stopWaiting?(): void;
  close(): Promise<void>;
}

export class InProcessExecutor implements StageExecutor {
  readonly queued = false;

  /** Running attempts by run and stage key, for live delivery. */
  private readonly running = new Map<string, RunnerHandle>();

  async execute(request: StageRequest, signal: AbortSignal, onEvent: (event: RunnerEvent) => void): Promise<StageResult> {
    const handle = getRunner(request.runner).start(request, onEvent);
    const id = `${request.runId}\u0000${request.stageKey}`;
    this.running.set(id, handle);
    void handle.result.finally(() => {
      if (this.running.get(id) === handle) this.running.delete(id);
    });
    const onAbort = () => handle.cancel(String(signal.reason ?? "cancelled"));
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    try {
      return await handle.result;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  async deliver(stage: { runId: string; stageKey: string }, message: { id: string; text: string }, mode: DeliveryMode): Promise<"delivered" | "not_running"> {
    const handle = this.running.get(`${stage.runId}\u0000${stage.stageKey}`);
    if (!handle) return "not_running";
    try {
      await handle.send(message.text, mode, message.id);
    } catch {
      return "not_running"; // it ended between the lookup and the write
    }
    return "delivered";
  }

  async wrapUp(stage: { runId: string; stageKey: string }, text: string, reason: WrapUpReason): Promise<void> {
    this.running.get(`${stage.runId}\u0000${stage.stageKey}`)?.wrapUp?.(text, reason);
  }

  async holdStage(stage: { runId: string; stageKey: string }, held: boolean): Promise<void> {
    this.running.get(`${stage.runId}\u0000${stage.stageKey}`)?.hold?.(held);
  }

  async close(): Promise<void> {}
}
