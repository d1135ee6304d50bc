/**
 * The origins of the runs of a list page (the ORIGIN column of `atomic
 * runs` and the console's run list): how each was started (its
 * `run_started`, journal/run-origin.ts `startOrigin`), and `recovery` when
 * the service recovered it, as the origin filter says (asked of the
 * journal for the page's time window and filters only, so the cost
 * follows the page, not the number of runs).
 */

import type { Journal, ListRunsFilter } from "../journal/journal.ts";
import { startOrigin, type RunOriginFilter } from "../journal/run-origin.ts";
import type { RunRecord } from "../journal/runs.ts";

/** Run id → its origins, start origin first (empty when nothing recorded says). */
export async function runOrigins(journal: Journal, runs: readonly RunRecord[], filter: ListRunsFilter): Promise<Map<string, RunOriginFilter[]>> {
  const out = new Map<string, RunOriginFilter[]>();
  if (runs.length === 0) return out;
  for (const run of runs) {
    const [first] = await journal.readEvents(run.id, 0, 1);
    const start = first?.type === "run_started" ? startOrigin(run.id, first.payload) : undefined;
    out.set(run.id, start ? [start] : []);
  }
  let recovered: Set<string>;
  if (filter.origin === "recovery") recovered = new Set(runs.map((r) => r.id));
  else {
    const { origin: _origin, limit: _limit, offset: _offset, ...rest } = filter;
    const since = Math.min(...runs.map((r) => r.createdAt));
    const before = Math.max(...runs.map((r) => r.createdAt)) + 1;
    const ids = new Set(runs.map((r) => r.id as string));
    const found = await journal.listRuns({ ...rest, origin: "recovery", createdSince: Math.max(since, rest.createdSince ?? since), createdBefore: Math.min(before, rest.createdBefore ?? before), limit: 10_000 });
    recovered = new Set(found.map((r) => r.id as string).filter((id) => ids.has(id)));
  }
  for (const id of recovered) out.get(id)?.push("recovery");
  return out;
}

/** `cli`, `schedule,recovery`, or `-` when nothing recorded says. */
export function originText(origins: readonly string[] | undefined): string {
  return origins && origins.length > 0 ? origins.join(",") : "-";
}
