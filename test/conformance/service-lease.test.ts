/**
 * The service lease (src/service/service-lease.ts) on every journal backend:
 * a lease under serviceLeaseKey(), a key no run has, is taken, refused to a
 * second holder, renewed and released like a run's lease (leases have no
 * foreign key to runs), and retention never sees it (it lists runs only).
 */

import { afterEach, describe, expect, test } from "bun:test";
import { serviceLeaseKey } from "../../src/service/service-lease.ts";
import { LeaseHeldError } from "../../src/shared/errors.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, liveHolder } from "./backends.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

for (const backend of BACKENDS) {
  describe(`${backend.name}: the service lease`, () => {
    test(`${backend.name}: a lease on the service key, with no run: one holder at a time, renewed, released, taken by the next`, async () => {
      const dir = makeTempDir("atomic-service-lease-");
      const j = await backend.open(dir);
      open.push(j);
      const other = await backend.open(dir); // another process's connection
      open.push(other);
      const lease = await j.acquireLease(serviceLeaseKey(), liveHolder("svc"), { timeoutMs: 10_000 });
      expect(lease.epoch).toBe(1);
      expect(await j.getRun(serviceLeaseKey())).toBeUndefined();
      await expect(other.acquireLease(serviceLeaseKey(), liveHolder("svc2"), { timeoutMs: 10_000 })).rejects.toBeInstanceOf(LeaseHeldError);
      const renewed = await j.renewLease(lease);
      expect(renewed.epoch).toBe(1);
      expect((await other.getLease(serviceLeaseKey()))?.holderId).toBe(lease.holderId);
      expect(await other.retention.candidates({ statuses: ["running", "completed"], before: Date.now() + 60_000, limit: 10 })).toEqual([]);
      await j.releaseLease(renewed);
      const next = await other.acquireLease(serviceLeaseKey(), liveHolder("svc2"), { timeoutMs: 10_000 });
      expect(next.epoch).toBe(2);
      await other.releaseLease(next);
    });
  });
}
