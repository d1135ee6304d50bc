/**
 * ctx.tool: a memoized side effect.
 *
 * `fn` runs until it succeeds or its attempts run out (exponential backoff
 * between attempts; a per-attempt timeout aborts its signal). Its value is
 * checkpointed; replay returns the checkpoint and never calls `fn` again.
 * The idempotency key (`<run id>:<position>`) is the same across attempts
 * and resumes, so `fn` can make an external effect exactly-once even when a
 * crash lands between its end and its checkpoint.
 *
 * Visibility: a first attempt is journaled as `step_started` once it has
 * run for TOOL_VISIBLE_AFTER_MS (or when it fails first), a retry at once;
 * an attempt that throws, as `step_failed` with its error. These are
 * progress records, not results (a resumed run numbers its attempts on
 * from them), so `show`, the live view and the page see a running tool and
 * every failed attempt. A quick success writes only its checkpoint: one
 * journal row per step, as before (bench/sequential).
 *
 * Not retried: a NonRetryableError, and a programming error in the tool's
 * own code (ReferenceError, TypeError, SyntaxError without a `code`; fetch's
 * network errors are TypeErrors with one, and are retried).
 *
 * Stopping: when the run stops (cancel, Ctrl-C) or its time budget is used
 * up, `fn`'s signal aborts. A function that ignores it is waited for
 * ABANDON_GRACE_MS, then its promise is abandoned (said once, as a
 * warning): the step ends as stopped and the run can record how it ended.
 */

import { StepFailedError, NonRetryableError, ensureError, errorInfo } from "../../shared/errors.ts";
import { faultPoint } from "../../shared/fault-points.ts";
import { backoffDelay } from "../../shared/backoff.ts";
import type { ToolCallInfo, ToolOptions } from "../../sdk/types.ts";
import type { StepRun } from "../step-run.ts";
import type { Scope } from "../scope.ts";
import { EVENT, type StepIdentity } from "../journal-events.ts";
import { argsHash, formatDigest, storedValue } from "../values.ts";
import { abortableDelay } from "./delay.ts";

/** A tool attempt running this long is recorded as started (quicker ones are seen through their checkpoint). */
export const TOOL_VISIBLE_AFTER_MS = 25;

/** How long a tool function that ignores its aborted signal is waited for before its promise is abandoned. */
export const ABANDON_GRACE_MS = 2_000;

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
  exec: StepRun,
  name: string,
  args: unknown,
  fn: (info: ToolCallInfo) => unknown,
  opts: ToolOptions,
): Promise<unknown> {
  const scope = exec.scope();
  const position = scope.nextPosition();
  let hash: bigint;
  let attempts = 0;
  try {
    hash = argsHash(args);
    const recorded = exec.cursor.claim(position, { kind: "tool", name, args: hash });
    if (recorded?.checkpoint) {
      emitEnded(exec, position, name, "completed", true);
      return Promise.resolve(settle(recorded.checkpoint.result as ToolRecord, name, opts));
    }
    attempts = recorded?.attempts ?? 0;
  } catch (err) {
    return Promise.reject(err);
  }
  return runLive(exec, scope, position, { kind: "tool", name, args: formatDigest(hash) }, attempts, fn, opts);
}

/** A step the journal has no checkpoint for: run `fn` (with retries) and record its outcome. */
async function runLive(
  exec: StepRun,
  scope: Scope,
  position: string,
  step: StepIdentity,
  /** Attempts earlier drives recorded as started (this drive numbers on from there). */
  recordedAttempts: number,
  fn: (info: ToolCallInfo) => unknown,
  opts: ToolOptions,
): Promise<unknown> {
  const { name } = step;
  await exec.startGate(scope);
  if (typeof fn !== "function") {
    throw new StepFailedError(name, `ctx.tool("${name}") needs a function as its third argument`, { code: "bad_step" });
  }

  const retries = opts.retries ?? 2;
  const backoff = opts.backoffMs ?? 200;
  const maxBackoff = opts.maxBackoffMs ?? 30_000;
  const idempotencyKey = `${exec.runId}:${position}`;
  const signal = exec.stepSignal(scope);
  const startedAt = Date.now();
  let record: ToolRecord;
  let failures = 0;
  let notRetried = "";
  let lastError: unknown;
  for (let attempt = recordedAttempts + 1; ; attempt++) {
    // Every call, retries included, only while the lease surely holds (lease-keeper.ts).
    exec.assertMayStart(scope);
    const attemptAt = Date.now();
    exec.tree.observer({ type: "step_started", runId: exec.runId, position, kind: "tool", name, attempt, at: attemptAt });
    let startRecorded = false;
    const recordStart = () => {
      if (startRecorded) return;
      startRecorded = true;
      recordProgress(exec, { runId: exec.runId, type: EVENT.stepStarted, key: position, payload: { ...step, attempt, startedAt: attemptAt } });
    };
    // A retry is recorded at once: the attempt log lists each attempt after a failed one (and a retry is slow anyway).
    const visible = attempt > 1 ? (recordStart(), undefined) : setTimeout(recordStart, TOOL_VISIBLE_AFTER_MS);
    try {
      const value = await callOnce(exec, name, fn, { idempotencyKey, attempt: attempt - recordedAttempts, signal }, opts.timeoutMs);
      record = { value: storedValue(value, `tool "${name}"`) };
      break;
    } catch (err) {
      if (signal.aborted) throw exec.stepStopError(scope);
      if (err instanceof StepFailedError && err.code === "not_serializable") throw err;
      const { code, message } = errorInfo(err); // its message redacted (shared/secrets.ts)
      const error = { name: ensureError(err).name, code, message };
      recordStart();
      recordProgress(exec, { runId: exec.runId, type: EVENT.stepFailed, key: position, payload: { ...step, attempt, error } });
      failures++;
      const permanent = notRetriedBecause(err);
      if (permanent) notRetried = ` (${permanent}: not retried)`;
      if (permanent || failures > retries) {
        lastError = err;
        record = { error: { code, message } };
        break;
      }
      await abortableDelay(backoffDelay({ firstMs: backoff, maxMs: maxBackoff }, failures - 1), signal).catch(() => {
        throw exec.stepStopError(scope);
      });
    } finally {
      clearTimeout(visible);
    }
  }
  if (record.error && opts.failureMode !== "return") {
    const message = `tool "${name}" failed after ${failures} attempt(s)${notRetried}: ${record.error.message}`;
    emitEnded(exec, position, name, "failed", false, { name: "ToolFailed", code: record.error.code, message });
    // The cause is what the tool's function threw: the failure names its file and line (shared/user-frames.ts).
    throw new StepFailedError(name, message, { code: "tool_failed", cause: lastError });
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

/** Why a tool's error is final: a NonRetryableError, or a programming error in the tool's code; undefined: retry. */
function notRetriedBecause(err: unknown): string | undefined {
  if (err instanceof NonRetryableError) return "NonRetryableError";
  const programming = err instanceof ReferenceError || err instanceof TypeError || err instanceof SyntaxError;
  // System and network errors (fetch's are TypeErrors) carry a `code`; a bug in the tool's own code does not.
  if (programming && (err as { code?: unknown }).code === undefined) return err.name;
  return undefined;
}

/**
 * A progress record (attempt started or failed): not awaited, committed
 * without waiting for the disk. The writer keeps the order, so it lands
 * before the step's checkpoint; lost, it changes nothing but the display.
 */
function recordProgress(exec: StepRun, entry: Parameters<StepRun["tree"]["append"]>[0]): void {
  void exec.tree.append({ ...entry, durable: false }).catch(() => {});
}

/**
 * One call of `fn`: it ends when `fn` settles, when its per-attempt timeout
 * passes (its signal aborts; counted as a failed attempt), or
 * ABANDON_GRACE_MS after the step's signal aborted when `fn` ignores it.
 */
async function callOnce(
  exec: StepRun,
  name: string,
  fn: (info: ToolCallInfo) => unknown,
  info: { idempotencyKey: string; attempt: number; signal: AbortSignal },
  timeoutMs: number | undefined,
): Promise<unknown> {
  const attempt = new AbortController();
  const signal = timeoutMs ? AbortSignal.any([info.signal, attempt.signal]) : info.signal;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let graceTimer: ReturnType<typeof setTimeout> | undefined;
  let onStop: (() => void) | undefined;
  const bounded = new Promise<never>((_, reject) => {
    if (timeoutMs) {
      timer = setTimeout(() => {
        const err = new Error(`timed out after ${timeoutMs} ms`);
        attempt.abort(err);
        reject(err);
      }, timeoutMs);
    }
    onStop = () => {
      graceTimer = setTimeout(() => {
        exec.tree.observer({
          type: "warning",
          runId: exec.runId,
          message: `tool "${name}" ignored its abort signal for ${ABANDON_GRACE_MS / 1000} s: its promise was abandoned (it may still be running)`,
          at: Date.now(),
        });
        reject(info.signal.reason);
      }, ABANDON_GRACE_MS);
    };
    if (info.signal.aborted) onStop();
    else info.signal.addEventListener("abort", onStop, { once: true });
  });
  try {
    return await Promise.race([(async () => fn({ ...info, signal }))(), bounded]);
  } finally {
    clearTimeout(timer);
    clearTimeout(graceTimer);
    if (onStop) info.signal.removeEventListener("abort", onStop);
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

function emitEnded(
  exec: StepRun,
  position: string,
  name: string,
  status: "completed" | "failed",
  replayed: boolean,
  error?: { name: string; code: string; message: string },
) {
  const at = replayed ? replayedAt() : Date.now();
  exec.tree.observer({ type: "step_ended", runId: exec.runId, position, kind: "tool", name, status, replayed, at, ...(error ? { error } : {}) });
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
