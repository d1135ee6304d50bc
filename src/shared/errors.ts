/**
 * Errors say what the engine does next.
 *
 * Every error the engine raises on purpose is an `AtomicError` with a stable
 * string `code`, a `disposition` (what happens next) and an optional `hint`
 * (one sentence telling the user what to do). The CLI prints `message` and
 * `hint` and exits with `exitCode`; it prints a stack only with `--verbose`.
 *
 * Dispositions:
 * - `usage`: the user asked for something impossible (bad input, unknown
 *   run). Nothing was written. Exit code 2.
 * - `terminal`: the run cannot go on as it is (a step failed for good, the
 *   workflow is nondeterministic). Exit code 1.
 * - `retryable`: an infrastructure fault (`worker_lost`,
 *   `storage_unavailable`, ...). The engine retries it; if it still fails,
 *   the run stays resumable. Exit code 1.
 * - `cancelled`: the user cancelled or interrupted. Exit code 4 / 130.
 */

import { hostLabel } from "./process-info.ts";
import { redact, redactValue } from "./secrets.ts";
import { formatPlace, userPlace } from "./user-frames.ts";

export type Disposition = "usage" | "terminal" | "retryable" | "cancelled";

/** Infrastructure fault codes (docs/design/journal.md); stable, retryable. */
export const INFRA_CODES = [
  "worker_lost",
  "worker_startup_failed",
  "worker_retry_limit",
  "worker_cleanup_unconfirmed",
  "stale_work_lease",
  "intercom_unavailable",
  "storage_unavailable",
] as const;
export type InfraCode = (typeof INFRA_CODES)[number];

export interface AtomicErrorOptions {
  hint?: string;
  /** The last lines of a failed stage's stderr, shown under the failure sentence. */
  stderr?: string[] | undefined;
  cause?: unknown;
  exitCode?: number;
}

/** The class names of an AtomicError, from its own up to AtomicError (see `Symbol.hasInstance` below). */
const CLASSES = Symbol.for("atomic.error.classes");

export class AtomicError extends Error {
  override name = "AtomicError";
  readonly hint: string | undefined;
  readonly exitCode: number;
  readonly stderr: string[] | undefined;
  constructor(
    readonly code: string,
    message: string,
    readonly disposition: Disposition,
    opts: AtomicErrorOptions = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.hint = opts.hint;
    this.stderr = opts.stderr?.length ? opts.stderr : undefined;
    this.exitCode = opts.exitCode ?? defaultExitCode(disposition);
    const classes: string[] = [];
    for (let c: unknown = new.target; typeof c === "function" && c !== Error; c = Object.getPrototypeOf(c)) classes.push((c as { name: string }).name);
    Object.defineProperty(this, CLASSES, { value: classes });
  }

  /**
   * `instanceof` by class name: a bundle of its own in the binary (the
   * Postgres journal, shared/entry-points.ts) has its own copy of this
   * module, and an error it throws must still be a LeaseLostError (or a
   * UsageError) to the engine and the CLI.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    const classes = (value as { [CLASSES]?: unknown } | null | undefined)?.[CLASSES];
    return Array.isArray(classes) && classes.includes(this.name);
  }

  /** Plain JSON form, as stored in the journal and printed by `--json`. */
  toJSON(): ErrorInfo {
    return { name: this.name, code: this.code, message: this.message, hint: this.hint, ...(this.stderr ? { stderr: this.stderr } : {}) };
  }

  /**
   * The message alone: workflow code that writes `${err}` or String(err)
   * shows users a sentence, not an internal class name ("StepFailedError: …").
   */
  override toString(): string {
    return this.message;
  }
}

function defaultExitCode(d: Disposition): number {
  switch (d) {
    case "usage":
      return 2;
    case "cancelled":
      return 4;
    default:
      return 1;
  }
}

/** The journaled shape of an error: enough to show and to re-raise on replay. */
export interface ErrorInfo {
  name: string;
  code: string;
  message: string;
  hint?: string | undefined;
  /** Where workflow code threw it: "file:line:column" (an error of the user's code, not atomic's). */
  at?: string | undefined;
  /** That error's stack, for --verbose. */
  stack?: string | undefined;
  /** The last lines of a failed stage's stderr. */
  stderr?: string[] | undefined;
}

/** Bad input from the user: nothing ran, nothing was written. */
export class UsageError extends AtomicError {
  override name = "UsageError";
  constructor(code: string, message: string, opts: AtomicErrorOptions = {}) {
    super(code, message, "usage", opts);
  }
}

/** The journal cannot be opened or written (corrupt file, newer schema, read-only home). */
export class StorageError extends AtomicError {
  override name = "StorageError";
  /**
   * The journal takes no writes now and the backend already waited for it
   * as long as it should (a database server gone for longer than its retry
   * time): a run stops at once, resumably, rather than retry its step.
   */
  readonly stopsRun: boolean;
  constructor(code: string, message: string, opts: AtomicErrorOptions & { stopsRun?: boolean } = {}) {
    super(code, message, code === "storage_unavailable" ? "retryable" : "usage", opts);
    this.stopsRun = opts.stopsRun === true;
  }
}

/** Another process holds the run's lease; this one must not drive the run. */
export class LeaseHeldError extends AtomicError {
  override name = "LeaseHeldError";
  constructor(
    readonly runId: string,
    readonly holder: { holderId: string; host: string; pid: number },
  ) {
    super(
      "lease_held",
      `run ${runId} is being driven by another process (${holder.holderId}, pid ${holder.pid} on ${hostLabel(holder.host)})`,
      "usage",
      { hint: "wait for it to finish, or stop that process and resume again" },
    );
  }
}

/**
 * This process's lease was taken over or lost: it must stop at once. With
 * `holder`, the process that drives the run now; with `expired`, the lease
 * could not be renewed by the driver's local deadline (it may be free).
 */
export class LeaseLostError extends AtomicError {
  override name = "LeaseLostError";
  constructor(
    readonly runId: string,
    readonly epoch: number,
    readonly detail?: { holder?: { holderId: string; host: string; pid: number }; expired?: boolean },
  ) {
    const holder = detail?.holder;
    super(
      "lease_lost",
      holder
        ? `lost the lease on run ${runId}: another process drives it now (${holder.holderId}, pid ${holder.pid} on ${hostLabel(holder.host)}), so this one stopped`
        : detail?.expired
          ? `lost the lease on run ${runId}: it could not be renewed in time, so this process stopped (no stage started, no tool called since)`
          : `lost the lease on run ${runId} (epoch ${epoch}); another process took it over`,
      "retryable",
      { hint: holder || !detail?.expired ? `follow it with: atomic show ${runId}` : `resume it with: atomic resume ${runId}` },
    );
  }
}

/**
 * A resumed run asked for a different step than the journal recorded at the
 * same position. Raised from exactly one place: the replay cursor.
 */
export class NondeterminismError extends AtomicError {
  override name = "NondeterminismError";
  constructor(
    readonly runId: string,
    readonly position: string,
    readonly expected: string,
    readonly recorded: string,
  ) {
    super(
      "nondeterminism",
      `run ${runId} replayed differently at step ${position}: the workflow now asks for ${expected}, the journal recorded ${recorded}`,
      "terminal",
      {
        hint: "workflow code must take the same path on resume; restore the earlier version of the file, or start a new run",
      },
    );
  }
}

/** A step failed for good (retries exhausted, non-zero exit, ...). */
export class StepFailedError extends AtomicError {
  override name = "StepFailedError";
  constructor(
    readonly step: string,
    message: string,
    opts: AtomicErrorOptions & { code?: string } = {},
  ) {
    super(opts.code ?? "step_failed", message, "terminal", opts);
  }
}

/** The run was interrupted (Ctrl-C) or cancelled while this operation waited. */
export class CancelledError extends AtomicError {
  override name = "CancelledError";
  constructor(message = "the run was stopped", code = "cancelled") {
    super(code, message, "cancelled");
  }
}

/** Normalize anything thrown into an Error. */
export function ensureError(value: unknown): Error {
  if (value instanceof Error) return value;
  if (typeof value === "string") return new Error(value);
  try {
    return new Error(JSON.stringify(value));
  } catch {
    return new Error(String(value));
  }
}

/** An error as data (journal records, run outcomes, --json output), known secret values redacted (secrets.ts). */
/**
 * Thrown by a ctx.tool function for a failure that trying again cannot fix
 * (a 4xx answer, invalid arguments): the tool fails at once, without the
 * retries it has left. Its `code` is what the failure records.
 */
export class NonRetryableError extends AtomicError {
  override name = "NonRetryableError";
  constructor(message: string, opts: { code?: string; cause?: unknown } = {}) {
    super(opts.code ?? "non_retryable", message, "terminal", opts.cause === undefined ? {} : { cause: opts.cause });
  }
}

export function errorInfo(value: unknown): ErrorInfo {
  const err = ensureError(value);
  let info: ErrorInfo;
  if (err instanceof AtomicError) info = redactValue(err.toJSON());
  else {
    const raw = (err as Error & { code?: unknown }).code;
    info = { name: err.name, code: typeof raw === "string" ? raw : "error", message: redact(err.message) };
  }
  const thrown = userError(err) ?? misuse(err);
  const place = thrown && userPlace(thrown);
  return place ? { ...info, at: formatPlace(place), stack: thrown.stack && redact(thrown.stack) } : info;
}

/**
 * atomic's refusal of a ctx call the user's code made with bad arguments
 * (`ctx.sleep("x")`, a stage without a name): its stack points into the
 * user's file at that very call, which is where the fix goes.
 */
function misuse(err: Error): Error | undefined {
  return err instanceof AtomicError && /^bad_/.test(err.code) ? err : undefined;
}

/**
 * The error the user's code threw, if this is one or wraps one (a tool's
 * failure keeps what its function threw as its cause). atomic's own errors
 * are not: their stack points into the user's file only at the ctx call.
 */
function userError(err: Error): Error | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (!(e instanceof AtomicError)) return e;
  }
  return undefined;
}

export function isInfraCode(code: string): code is InfraCode {
  return (INFRA_CODES as readonly string[]).includes(code);
}
