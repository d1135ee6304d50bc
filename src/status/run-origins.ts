/**
 * The origins of the runs of a list page (the ORIGIN column of `atomic
 * runs` and the console's run list): how each was started and `recovery`
 * when the service recovered it, exactly as the origin filter says
 * (journal/run-origin.ts), read from the runs' own rows (RunRecord.origin,
 * .recovered, kept by the journal): no event and no other query.
 */

import type { RunOriginFilter } from "../journal/run-origin.ts";
import type { RunRecord } from "../journal/runs.ts";

/** A run's origins, start origin first (empty when nothing recorded says). */
export function runOrigins(run: Pick<RunRecord, "origin" | "recovered">): RunOriginFilter[] {
  const out: RunOriginFilter[] = run.origin ? [run.origin] : [];
  if (run.recovered) out.push("recovery");
  return out;
}

/** `cli`, `schedule,recovery`, or `-` when nothing recorded says. */
export function originText(origins: readonly string[] | undefined): string {
  return origins && origins.length > 0 ? origins.join(",") : "-";
}
