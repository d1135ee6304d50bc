/**
 * The environment of a stage's processes, decided here and nowhere else:
 * the shell runner's command, the openai runner's `bash` tool and the CLI
 * agents all start with `stageEnv(request, …)`.
 *
 * - Everything of the process that starts the stage (a worker, or the root
 *   with --in-process) passes through (on a worker host, with the run's
 *   recorded environment over it: `runEnv`, shared/recorded-env.ts), except the credential variables of
 *   shared/secrets.ts (provider keys, the journal URL, PGPASSWORD, the
 *   status token) and atomic's internal configuration variables: a prompt
 *   injection that runs `env` must not find the key atomic talks to its
 *   model with (nor in /proc/$PPID/environ: shared/non-dumpable.ts).
 * - The stage's `env` option comes next: `NAME: "value"` sets a variable
 *   (any name, credentials included: the stage asked for it by name);
 *   `NAME: true` passes this process's own value of NAME, so a key can be
 *   handed to a stage without its value appearing in the workflow or the
 *   journal.
 * - `credentials` names the credential variables a CLI agent needs to reach
 *   its own provider (each adapter lists them); only those pass.
 * - Last, the stage's identity (ATOMIC_RUN_ID, ATOMIC_STAGE, ATOMIC_STAGE_KEY,
 *   ATOMIC_ATTEMPT) and the token of this process's group guard
 *   (ATOMIC_GUARD: shell/group-guard.ts), which the stage cannot override;
 *   with traces on, TRACEPARENT (the attempt's span).
 */

import type { StageRequest } from "./types.ts";
import { guardToken } from "./shell/group-guard.ts";
import { GUARD_ENV } from "../shared/run-processes.ts";
import { overRecorded } from "../shared/recorded-env.ts";
import { KEPT_FROM_STAGES, childEnv, passThroughValue, type VariableName } from "../shared/config/environment.ts";

/** Credentials and atomic's internal configuration (the registry's keptFromStages). */
const WITHHELD: ReadonlySet<string> = new Set(KEPT_FROM_STAGES);

export function stageEnv(
  request: Pick<StageRequest, "env" | "runId" | "stageName" | "stageKey" | "attempt" | "traceparent" | "runEnv">,
  credentials: readonly string[] = [],
): Record<string, string> {
  // On a worker host, the run's recorded environment over the host's (its settings and secrets stay the host's).
  const env = request.runEnv ? overRecorded(inheritedEnv(credentials), request.runEnv) : inheritedEnv(credentials);
  for (const [k, v] of Object.entries(request.env ?? {})) {
    if (v === true) {
      const mine = passThroughValue(k);
      if (mine !== undefined) env[k] = mine;
    } else env[k] = v;
  }
  const key = attemptKey(request);
  handedOut.delete(key);
  handedOut.add(key);
  if (handedOut.size > HANDED_OUT_LIMIT) handedOut.delete(handedOut.values().next().value!);
  Object.assign(env, stageMarker(request), { ATOMIC_STAGE: request.stageName, [GUARD_ENV]: guardToken } satisfies Partial<Record<VariableName, string>>);
  // The stage attempt's span (traces on): the stage's own OpenTelemetry spans nest under it.
  if (request.traceparent) env.TRACEPARENT = request.traceparent;
  return env;
}

/** The attempts whose marker stageEnv has put in an environment in this process, oldest first (bounded: see markerHandedOut). */
const handedOut = new Set<string>();
/** A worker runs one attempt at a time and asks right after it; the bound only keeps a process that never asks (the root running stages in process) from growing. */
const HANDED_OUT_LIMIT = 1_000;

function attemptKey(request: Pick<StageRequest, "runId" | "stageKey" | "attempt">): string {
  return `${request.runId}\u0000${request.stageKey}\u0000${request.attempt}`;
}

/**
 * Whether a process of this attempt can exist: only an environment made by
 * stageEnv carries the attempt's marker, so an attempt that never asked for
 * one (an agent stage whose tools started no command) left no process
 * behind. Forgets the attempt. The worker's check for leftovers
 * (pool/leftovers.ts) scans /proc only when this is true.
 */
export function markerHandedOut(request: Pick<StageRequest, "runId" | "stageKey" | "attempt">): boolean {
  return handedOut.delete(attemptKey(request));
}

/** The variables of stageEnv that only this attempt of this stage carries, and every process it starts inherits (process-tree.ts finds them by it). */
export function stageMarker(request: Pick<StageRequest, "runId" | "stageKey" | "attempt">): Partial<Record<VariableName, string>> {
  return { ATOMIC_RUN_ID: request.runId, ATOMIC_STAGE_KEY: request.stageKey, ATOMIC_ATTEMPT: String(request.attempt) };
}

/** What a process that pinned its environment (pinEnvironment) passes on without credentials: computed once. */
let pinned: Readonly<Record<string, string>> | undefined;

/**
 * This process's environment is final: what stages inherit of it is worked
 * out once, not at every stage. A worker calls it once it is set up (it
 * changes nothing of its own environment afterwards); the root does not,
 * since a process that drives in-process stages may still change its own.
 */
export function pinEnvironment(): void {
  pinned = ownEnv([]);
}

/** This process's environment without the credential and internal variables (but those in `credentials`). */
export function inheritedEnv(credentials: readonly string[] = []): Record<string, string> {
  return pinned && credentials.length === 0 ? { ...pinned } : ownEnv(credentials);
}

function ownEnv(credentials: readonly string[]): Record<string, string> {
  return childEnv({}, (k) => WITHHELD.has(k) && !credentials.includes(k));
}
