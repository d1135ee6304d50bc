/**
 * The origins of the runs of a list page (the ORIGIN column of `atomic
 * runs` and the console's run list): how each was started and `recovery`
 * when the service recovered it, exactly as the origin filter says
 * (journal/run-origin.ts): asked of the journal with that filter, once per
 * origin, for the page's time window and filters only, so the cost follows
 * the page, not the number of runs, and no event is read here.
 */

import type { Journal, ListRunsFilter } from "../journal/journal.ts";
import { RUN_ORIGINS, type RunOriginFilter } from "../journal/run-origin.ts";
import type { RunRecord } from "../journal/runs.ts";

/** Run id → its origins, start origin first (empty when nothing recorded says). */
export async function runOrigins(journal: Journal, runs: readonly RunRecord[], filter: ListRunsFilter): Promise<Map<string, RunOriginFilter[]>> {
  const out = new Map<string, RunOriginFilter[]>();
  if (runs.length === 0) return out;
  for (const run of runs) out.set(run.id, []);
  const ids = new Set(runs.map((r) => r.id as string));
  const { origin: _origin, limit: _limit, offset: _offset, ...rest } = filter;
  const since = Math.min(...runs.map((r) => r.createdAt));
  const before = Math.max(...runs.map((r) => r.createdAt)) + 1;
  // The page's runs among those one origin selects, asked of the journal over the page's time window (one
  // query per origin, the filter's own SQL): the run list reads no event of its own (status/summaries.ts).
  const among = async (origin: RunOriginFilter): Promise<Set<string>> => {
    if (filter.origin === origin) return ids;
    const found = await journal.listRuns({ ...rest, origin, createdSince: Math.max(since, rest.createdSince ?? since), createdBefore: Math.min(before, rest.createdBefore ?? before), limit: 10_000 });
    return new Set(found.map((r) => r.id as string).filter((id) => ids.has(id)));
  };
  // A run has one start origin (the filter's conditions exclude each other); a filter by one of them says it for all.
  const starts = filter.origin && filter.origin !== "recovery" ? [filter.origin] : RUN_ORIGINS.filter((o) => o !== "recovery");
  for (const origin of starts) for (const id of await among(origin)) if (out.get(id)!.length === 0) out.get(id)!.push(origin);
  for (const id of await among("recovery")) out.get(id)!.push("recovery");
  return out;
}

/** `cli`, `schedule,recovery`, or `-` when nothing recorded says. */
export function originText(origins: readonly string[] | undefined): string {
  return origins && origins.length > 0 ? origins.join(",") : "-";
}
