/**
 * Run tags on every journal backend (journal/tags.ts, migration 14): a set
 * inserts or replaces each key; `of` returns each run's tags (runs without
 * any left out); listings and counts filter on tags (every tag must match,
 * with the other filters); retention deletes a run's tags with it.
 */

import { afterEach, describe, expect, test } from "bun:test";
import type { Journal } from "../../src/journal/journal.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, startRoot } from "./backends.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

for (const backend of BACKENDS) {
  describe(`${backend.name}: run tags`, () => {
    test(`${backend.name}: set, replace, read by run, filter listings and counts, deleted with the run`, async () => {
      const j = await backend.open(makeTempDir("atomic-tags-"));
      open.push(j);
      const a = await startRoot(j, "flow");
      const b = await startRoot(j, "flow");
      const c = await startRoot(j, "other");
      await j.tags.set(a.rootId, { team: "search", env: "prod" }, 1_000);
      await j.tags.set(b.rootId, { team: "search", env: "staging" }, 1_000);
      await j.tags.set(b.rootId, { env: "prod" }, 2_000); // replaces env, keeps team
      await j.tags.set(c.rootId, {}, 2_000); // nothing to set

      const tags = await j.tags.of([a.rootId, b.rootId, c.rootId]);
      expect(Object.fromEntries(tags)).toEqual({ [a.rootId]: { env: "prod", team: "search" }, [b.rootId]: { env: "prod", team: "search" } });
      expect(await j.tags.of([])).toEqual(new Map());

      const ids = async (filter: Parameters<Journal["listRuns"]>[0]) => (await j.listRuns(filter)).map((r) => r.id).sort();
      expect(await ids({ tags: { team: "search" } })).toEqual([a.rootId, b.rootId].sort());
      expect(await ids({ tags: { team: "search", env: "prod" } })).toEqual([a.rootId, b.rootId].sort());
      expect(await ids({ tags: { env: "staging" } })).toEqual([]);
      expect(await ids({ tags: { team: "search" }, workflowName: "other" })).toEqual([]);
      expect(await ids({ tags: { team: "search" }, limit: 1 })).toHaveLength(1);
      expect(await j.countRuns({ tags: { team: "search" } })).toBe(2);
      expect(await j.countRuns({ tags: { team: "nobody" } })).toBe(0);
      expect(await j.countRuns({})).toBe(3);

      await j.append(a.lease, [{ runId: a.rootId, type: "status_changed", payload: {}, patch: { status: "completed", endedAt: Date.now() } }]);
      await j.releaseLease(a.lease);
      const deleted = await j.retention.deleteTree(a.rootId, () => true);
      expect(deleted!.rows.run_tags).toBe(2);
      expect(Object.fromEntries(await j.tags.of([a.rootId, b.rootId]))).toEqual({ [b.rootId]: { env: "prod", team: "search" } });
      expect(await j.countRuns({ tags: { team: "search" } })).toBe(1);
    });
  });
}
