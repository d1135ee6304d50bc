/**
 * Run tags: the contract (shared/tags.ts says what a tag may be). Tags
 * belong to root runs; setting a key again replaces its value. They are
 * not events: a tag is set by `atomic run --tag` once the run is recorded
 * and by `ctx.tag` as the workflow reaches it (again on replay, to the same
 * value), so a plain upsert is all the journal does. Listings filter on
 * them (ListRunsFilter.tags); retention deletes them with their run.
 */

import type { RunId } from "../shared/ids.ts";

export interface RunTagStore {
  /** Sets each key of `tags` on the run (insert or replace). */
  set(runId: RunId, tags: Readonly<Record<string, string>>, at: number): Promise<void>;
  /** The tags of each of `runIds` that has any, by run id; keys sorted. */
  of(runIds: readonly RunId[]): Promise<Map<RunId, Record<string, string>>>;
}
