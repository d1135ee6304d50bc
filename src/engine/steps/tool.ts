/**
 * ctx.tool: a memoized side effect.
 *
 * `fn` runs until it succeeds or its attempts run out (exponential backoff
 * between attempts; a per-attempt timeout aborts its signal). Its value is
 * checkpointed; replay returns the checkpoint and never calls `fn` again.
 * The idempotency key (`<run id>:<position>`) is the same across attempts
 * and resumes, so `fn` can make an external effect exactly-once even when a
 * crash lands between its end and its checkpoint.
 */

import { StepFailedError, ensureError, errorInfo } from "../../shared/errors.ts";
import { faultPoint } from "../../shared/fault-points.ts";
import type { ToolCallInfo, ToolOptions } from "../../sdk/types.ts";
import type { RunExecution } from "../run-execution.ts";
import type { Scope } from "../scope.ts";
import { EVENT, type StepIdentity } from "../journal-events.ts";
import { argsHash, formatDigest, storedValue } from "../values.ts";
import { abortableDelay } from "./delay.ts";

interface ToolRecord {
  value?: unknown;
  error?: { code: string; message: string };
}

/**
 * A replayed step (the common case of a resume) returns its checkpoint
 * without an async function's frame: its errors (a divergence, a recorded
 * failure) still reach the caller as a rejected promise, never as a throw.
 */
export function runTool(
  exec: RunExecution,
  name: string,
  args: unknown,
  fn: (info: ToolCallInfo) => unknown,
  opts: ToolOptions,
): Promise<unknown> {
  const scope = exec.scope();
  const position = scope.nextPosition();
  let hash: bigint;
  try {
    hash = argsHash(args);
    const recorded = exec.cursor.claim(position, { kind: "tool", name, args: hash });
    if (recorded?.checkpoint) {
      emitEnded(exec, position, name, "completed", true);
      return Promise.resolve(settle(recorded.checkpoint.result as ToolRecord, name, opts));
    }
  } catch (err) {
    return Promise.reject(err);
  }
  return runLive(exec, scope, position, { kind: "tool", name, args: formatDigest(hash) }, name, fn, opts);
}

/** A step the journal has no checkpoint for: run `fn` (with retries) and record its outcome. */
async function runLive(
  exec: RunExecution,
  scope: Scope,
  position: string,
  step: StepIdentity,
  name: string,
  fn: (info: ToolCallInfo) => unknown,
  opts: ToolOptions,
): Promise<unknown> {
  await exec.startGate(scope);
  if (typeof fn !== "function") {
    throw new StepFailedError(name, `ctx.tool("${name}") needs a function as its third argument`, { code: "bad_step" });
  }

  const retries = opts.retries ?? 2;
  const backoff = opts.backoffMs ?? 200;
  const maxBackoff = opts.maxBackoffMs ?? 30_000;
  const idempotencyKey = `${exec.runId}:${position}`;
  const startedAt = Date.now();
  let record: ToolRecord;
  let lastError: unknown;
  for (let attempt = 1; ; attempt++) {
    // Every call, retries included, only while the lease surely holds (lease-keeper.ts).
    exec.assertMayStart(scope);
    try {
      const value = await callOnce(fn, { idempotencyKey, attempt, signal: scope.signal }, opts.timeoutMs);
      record = { value: storedValue(value, `tool "${name}"`) };
      break;
    } catch (err) {
      if (scope.signal.aborted) throw exec.stopError(scope);
      if (err instanceof StepFailedError && err.code === "not_serializable") throw err;
      if (attempt > retries) {
        lastError = err;
        const { code, message } = errorInfo(err); // its message redacted (shared/secrets.ts)
        record = { error: { code, message } };
        break;
      }
      await abortableDelay(Math.min(maxBackoff, backoff * 2 ** (attempt - 1)), scope.signal);
    }
  }
  if (record.error && opts.failureMode !== "return") {
    emitEnded(exec, position, name, "failed", false);
    // The cause is what the tool's function threw: the failure names its file and line (shared/user-frames.ts).
    throw new StepFailedError(name, `tool "${name}" failed after ${retries + 1} attempt(s): ${record.error.message}`, {
      code: "tool_failed",
      cause: lastError,
    });
  }
  faultPoint("before-checkpoint");
  await exec.tree.append({
    runId: exec.runId,
    type: EVENT.checkpoint,
    key: position,
    payload: { ...step, result: record, startedAt },
  });
  faultPoint("after-checkpoint");
  emitEnded(exec, position, name, record.error ? "failed" : "completed", false);
  return settle(record, name, opts);
}

async function callOnce(
  fn: (info: ToolCallInfo) => unknown,
  info: { idempotencyKey: string; attempt: number; signal: AbortSignal },
  timeoutMs: number | undefined,
): Promise<unknown> {
  if (!timeoutMs) return await fn(info);
  const attempt = new AbortController();
  const signal = AbortSignal.any([info.signal, attempt.signal]);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new Error(`timed out after ${timeoutMs} ms`);
      attempt.abort(err);
      reject(err);
    }, timeoutMs);
  });
  try {
    return await Promise.race([fn({ ...info, signal }), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function settle(record: ToolRecord, name: string, opts: ToolOptions): unknown {
  if (opts.failureMode === "return") {
    return record.error ? { ok: false, error: record.error } : { ok: true, value: record.value };
  }
  if (record.error) {
    throw new StepFailedError(name, `tool "${name}" failed: ${record.error.message}`, { code: "tool_failed" });
  }
  return record.value;
}

function emitEnded(exec: RunExecution, position: string, name: string, status: "completed" | "failed", replayed: boolean) {
  const at = replayed ? replayedAt() : Date.now();
  exec.tree.observer({ type: "step_ended", runId: exec.runId, position, kind: "tool", name, status, replayed, at });
}

/**
 * The time replayed tool steps end at. Replaying a step takes well under a
 * microsecond and Date.now() counts milliseconds, yet reading it cost about
 * a third of a replayed step (~0.5 ms of a 10,000-step replay). So up to
 * REPLAY_CLOCK_USES replayed steps share one reading, and never beyond the
 * event-loop turn it was taken in: anything that waits for a timer or I/O
 * between two replayed steps gets a fresh one.
 */
const REPLAY_CLOCK_USES = 16;
let clockReading = 0;
let clockUses = 0;
let clockExpiring = false;

function replayedAt(): number {
  if (clockUses === 0) {
    clockReading = Date.now();
    clockUses = REPLAY_CLOCK_USES;
    if (!clockExpiring) {
      clockExpiring = true;
      setImmediate(expireClock);
    }
  }
  clockUses--;
  return clockReading;
}

function expireClock(): void {
  clockExpiring = false;
  clockUses = 0;
}
