/**
 * Idempotent starts: a root run whose id the caller chose (a run key,
 * shared/ids.ts). The first start with a key starts the run; every later
 * one, from any process, gets the existing run instead, provided it asks
 * for the same workflow with the same inputs; a different request with the
 * same key is refused (`run_id_conflict`), as DBOS and Temporal do with
 * workflow ids.
 *
 * Races: the journal decides. Two starts of one key at once both find no
 * run; one takes the run's lease first and the other gets LeaseHeldError,
 * or takes the lease after the first released it and has its first event
 * refused (the runs row exists). Either way the loser reads the run back
 * and answers as if it had come second. The id itself never names two
 * runs: the runs row is keyed by it.
 */

import type { RunRecord } from "../journal/runs.ts";
import { LeaseHeldError, UsageError } from "../shared/errors.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";
import type { RunId } from "../shared/ids.ts";
import { RootRun, type DriverOptions, type NewRunRequest } from "./driver.ts";

export type KeyedStart = { kind: "started"; root: RootRun } | { kind: "existing"; run: RunRecord };

/** A start that lost the race sees the winner's run within this long (its lease is taken before its first event). */
const RACE_WAIT_MS = 5_000;

/**
 * How often the loser looks for the winner's run meanwhile: the winner is another process, and the journal
 * tells nobody of a new run (SQLite has no notification across processes; docs/design/processes.md "Waiting
 * for another process"), so it reads again, from 10 ms on, at most every 500 ms.
 */
const RACE_BACKOFF: Backoff = { firstMs: 10, maxMs: 500, jitter: 0.5 };

export async function startOrAttach(opts: DriverOptions, req: NewRunRequest & { runId: RunId }): Promise<KeyedStart> {
  const found = await opts.journal.getRun(req.runId);
  if (found) return { kind: "existing", run: sameRequest(found, req) };
  try {
    return { kind: "started", root: await RootRun.start(opts, req) };
  } catch (err) {
    const deadline = Date.now() + RACE_WAIT_MS;
    for (let look = 0; ; look++) {
      const run = await opts.journal.getRun(req.runId);
      if (run) return { kind: "existing", run: sameRequest(run, req) };
      // Only a lease held by another start of this key is a race to wait out; anything else is this start's failure.
      if (!(err instanceof LeaseHeldError) || Date.now() > deadline) throw err;
      await Bun.sleep(backoffDelay(RACE_BACKOFF, look));
    }
  }
}

/** What a keyed start compares: the workflow's name and the inputs as recorded (JSON, keys in any order). */
export function requestConflict(run: RunRecord, workflowName: string, inputs: unknown): string | undefined {
  if (run.parentId !== null) return `it is a child run of ${run.rootId}`;
  if (run.workflowName !== workflowName) return `it runs workflow ${run.workflowName}, not ${workflowName}`;
  const recorded = canonical(run.inputs);
  const asked = canonical(JSON.parse(JSON.stringify(inputs ?? {})));
  if (recorded !== asked) return "it was started with other inputs";
  return undefined;
}

function sameRequest(run: RunRecord, req: NewRunRequest): RunRecord {
  const conflict = requestConflict(run, req.definition.name, req.inputs);
  if (conflict) throw runIdConflict(run.id, conflict);
  return run;
}

export function runIdConflict(id: string, why: string): UsageError {
  return new UsageError("run_id_conflict", `a run with id ${id} exists and ${why}`, {
    hint: `start it with the same workflow and inputs to get that run, or choose another id; see it with: atomic show ${id}`,
  });
}

/** JSON with object keys sorted, so the order inputs were given in does not matter. */
function canonical(value: unknown): string {
  return JSON.stringify(value ?? {}, (_key, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1))) : v,
  );
}
