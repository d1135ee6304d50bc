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

import { redact, redactValue } from "./secrets.ts";

export type Disposition = "usage" | "terminal" | "retryable" | "cancelled";

/** Infrastructure fault codes (SYSTEM.md section 5); stable, retryable. */
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
  cause?: unknown;
  exitCode?: number;
}

export class AtomicError extends Error {
  override name = "AtomicError";
  readonly hint: string | undefined;
  readonly exitCode: number;
  constructor(
    readonly code: string,
    message: string,
    readonly disposition: Disposition,
    opts: AtomicErrorOptions = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.hint = opts.hint;
    this.exitCode = opts.exitCode ?? defaultExitCode(disposition);
  }

  /** Plain JSON form, as stored in the journal and printed by `--json`. */
  toJSON(): ErrorInfo {
    return { name: this.name, code: this.code, message: this.message, hint: this.hint };
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
  constructor(code: string, message: string, opts: AtomicErrorOptions = {}) {
    super(code, message, code === "storage_unavailable" ? "retryable" : "usage", opts);
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
      `run ${runId} is being driven by another process (${holder.holderId}, pid ${holder.pid} on ${holder.host})`,
      "usage",
      { hint: "wait for it to finish, or stop that process and resume again" },
    );
  }
}

/** This process's lease was taken over or lost: it must stop writing at once. */
export class LeaseLostError extends AtomicError {
  override name = "LeaseLostError";
  constructor(readonly runId: string, readonly epoch: number) {
    super(
      "lease_lost",
      `lost the lease on run ${runId} (epoch ${epoch}); another process took it over`,
      "retryable",
      { hint: `inspect it with: atomic show ${runId}` },
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
  if (err instanceof AtomicError) return redactValue(err.toJSON());
  const raw = (err as Error & { code?: unknown }).code;
  const code = typeof raw === "string" ? raw : "error";
  return { name: err.name, code, message: redact(err.message) };
}

export function isInfraCode(code: string): code is InfraCode {
  return (INFRA_CODES as readonly string[]).includes(code);
}
