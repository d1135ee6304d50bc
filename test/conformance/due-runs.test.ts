/**
 * The service's judgement of which runs to drive (src/service/due-runs.ts)
 * against a record that aged while the scan went on, on every backend: a
 * scan lists the unfinished runs, then judges them one by one, reading each
 * one's lease as it comes to it. A run whose driver recorded its end and
 * released its lease in between looks abandoned on the listed record (it
 * says running, and nobody holds the lease); `confirm`, which reads the
 * lease and then the run, sees the end. The recovery duty starts a drive
 * only on a confirmed verdict, so a run that ended is never driven again.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { CANDIDATE_STATUSES, DueRuns } from "../../src/service/due-runs.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, startRoot } from "./backends.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

for (const backend of BACKENDS) {
  describe(`${backend.name}: due runs on a listed record`, () => {
    test(`${backend.name}: a run that ended after the scan listed it is due on the listed record, and not once confirmed`, async () => {
      const journal = await backend.open(makeTempDir("atomic-due-runs-"));
      open.push(journal);
      const { rootId, lease } = await startRoot(journal, "ends");
      const [listed] = await journal.listRuns({ statuses: CANDIDATE_STATUSES, limit: 10 });
      expect(listed?.id).toBe(rootId);
      // The driver records the end, then gives the lease back (engine/driver.ts run).
      await journal.append(lease, [{ runId: rootId, type: "status_changed", payload: { status: "completed" }, patch: { status: "completed", endedAt: Date.now() } }]);
      await journal.releaseLease(lease);
      const due = new DueRuns(journal);
      expect(await due.verdict(listed!)).toMatchObject({ due: true, reason: "crashed" });
      const confirmed = await due.confirm(rootId);
      expect(confirmed?.run.status).toBe("completed");
      expect(confirmed?.verdict.due).toBe(false);
    });

    test(`${backend.name}: a run nobody drives (its lease given back while it runs) stays due once confirmed`, async () => {
      const journal = await backend.open(makeTempDir("atomic-due-runs-"));
      open.push(journal);
      const { rootId, lease } = await startRoot(journal, "detached");
      await journal.releaseLease(lease);
      const confirmed = await new DueRuns(journal).confirm(rootId);
      expect(confirmed?.verdict).toMatchObject({ due: true, reason: "crashed" });
    });
  });
}
