/**
 * What a workflow author sees: the options and results of every primitive.
 *
 * Failure semantics shared by all primitives (the "durable step" contract):
 * - A step whose result was checkpointed never runs again for that run;
 *   on resume it returns the recorded result at once.
 * - A step runs at least once: a crash between its end and its checkpoint
 *   re-runs it (ctx.tool hands you an idempotency key for that reason).
 * - A step that fails with `failureMode: "throw"` (the default) is not
 *   checkpointed: the run fails, and `atomic resume` runs the step again.
 *   With `failureMode: "return"` the failure is a result, checkpointed and
 *   replayed like any other.
 */

import type { GenericSchema, InferOutput } from "valibot";

export type InputSchemas = Record<string, GenericSchema>;
export type InputsOf<S extends InputSchemas> = { [K in keyof S]: InferOutput<S[K]> };

export type FailureMode = "throw" | "return";

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  /** Cost in integer micro-dollars (exact sums across stages). */
  costMicroUsd: number;
  turns: number;
  model?: string;
}

export type StageStatus = "completed" | "failed" | "cancelled";

/** Result of a stage (ctx.task / ctx.shell). */
export interface StageResult {
  status: StageStatus;
  /** Stage output text: stdout for shell (capped; the whole output is in `outputPath`). */
  text: string;
  exitCode: number | null;
  /** File holding the stage's full stdout. */
  outputPath: string;
  /** File holding the stage's stderr. */
  errorPath?: string;
  structured?: unknown;
  usage?: Usage;
  sessionId?: string;
  /** Set when status is not "completed". */
  error?: { code: string; message: string };
}

export interface TaskOptions {
  /** Shell command: runs the stage with the shell runner. */
  shell?: string;
  /** Agent prompt: runs the stage with an agent runner (later issues). */
  prompt?: string;
  runner?: string;
  model?: string;
  cwd?: string;
  /** Extra environment variables for the stage process. */
  env?: Record<string, string>;
  timeoutMs?: number;
  /** Attempts after the first on failure (default 0). Infrastructure faults are retried on top (3 attempts). */
  retries?: number;
  failureMode?: FailureMode;
}

export interface ShellOptions extends Omit<TaskOptions, "shell" | "prompt"> {}

export interface ToolOptions {
  /** Attempts after the first when `fn` throws (default 2). */
  retries?: number;
  /** First backoff delay; doubles per attempt (default 200 ms, capped at maxBackoffMs). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** Abort `fn` after this long (its signal fires), counted as a failed attempt. */
  timeoutMs?: number;
  failureMode?: FailureMode;
}

export interface ToolCallInfo {
  /** Stable across retries and resumes of this step: use it to make external effects exactly-once. */
  idempotencyKey: string;
  /** Fires when the run is cancelled or interrupted, or the attempt times out. */
  signal: AbortSignal;
  /** 1-based attempt number. */
  attempt: number;
}

export type ToolResult<T> =
  | { ok: true; value: T }
  | { ok: false; error: { code: string; message: string } };

/** A step given to ctx.parallel / ctx.chain: a stage described by data, or a function. */
export type StepSpec =
  | ({ name: string } & TaskOptions)
  | (() => Promise<unknown>);

export interface ParallelOptions {
  /** At most this many steps at once (default: all). */
  concurrency?: number;
  /** Stop starting new steps after the first failure and fail at once (default true). */
  failFast?: boolean;
}

export interface ExitOptions {
  status?: "completed" | "failed" | "cancelled";
  reason?: string;
  outputs?: unknown;
}

export interface WorkflowContext<I = Record<string, unknown>> {
  readonly runId: string;
  readonly inputs: I;
  /** True while this run replays recorded steps (for logging only: never branch on it). */
  readonly replaying: boolean;
  /** Log a line to the run's output (not journaled). */
  log(message: string): void;

  task(name: string, opts: TaskOptions): Promise<StageResult>;
  shell(name: string, command: string, opts?: ShellOptions): Promise<StageResult>;
  /** Runs steps concurrently; resolves to their results in input order. */
  parallel(steps: StepSpec[], opts?: ParallelOptions): Promise<unknown[]>;
  /** Runs steps one after another; resolves to their results in order. */
  chain(steps: StepSpec[]): Promise<unknown[]>;
  /** Runs a child workflow as its own run (own id), nested under a boundary stage. */
  workflow<CI extends InputSchemas, CO>(
    child: WorkflowDefinition<CI, CO>,
    inputs: Partial<InputsOf<CI>>,
    opts?: { name?: string },
  ): Promise<CO>;
  tool<T>(name: string, args: unknown, fn: (info: ToolCallInfo) => Promise<T> | T, opts?: ToolOptions & { failureMode?: "throw" }): Promise<T>;
  tool<T>(name: string, args: unknown, fn: (info: ToolCallInfo) => Promise<T> | T, opts: ToolOptions & { failureMode: "return" }): Promise<ToolResult<T>>;
  /** A durable timer: a resumed run waits only for the time that is left. */
  sleep(ms: number, name?: string): Promise<void>;
  /** Ends the run now with the given status and outputs. */
  exit(opts?: ExitOptions): never;
}

export interface WorkflowConfig<I extends InputSchemas, O> {
  name: string;
  description?: string;
  inputs?: I;
  /** Valibot schema the return value must satisfy. */
  outputs?: GenericSchema<unknown, O>;
  run(ctx: WorkflowContext<InputsOf<I>>): Promise<O>;
}

export const WORKFLOW_BRAND = Symbol.for("atomic.workflow");

export interface WorkflowDefinition<I extends InputSchemas = InputSchemas, O = unknown> extends WorkflowConfig<I, O> {
  readonly [WORKFLOW_BRAND]: true;
}
