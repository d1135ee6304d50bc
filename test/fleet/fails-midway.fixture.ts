/**
 * A test file that fails midway, run by test/fleet/harness.test.ts with
 * `bun test` (its name keeps the suite from picking it up): a fleet whose
 * hosts are busy (process trees, one host partitioned) when an assertion
 * fails. FIXTURE_MODE is the fleet's mode; FIXTURE_CLEANUP=afterAll destroys
 * it in afterAll as a test file should, anything else leaves it to the
 * owner's watcher. Prints one JSON line naming what it made.
 */

import { afterAll, beforeAll, expect, test } from "bun:test";
import { waitUntil } from "../helpers/atomic.ts";
import { type Fleet, type FleetMode, makeFleet } from "../helpers/fleet.ts";

let fleet: Fleet | undefined;
beforeAll(async () => {
  fleet = await makeFleet({ hosts: 2, mode: process.env.FIXTURE_MODE as FleetMode });
});
if (process.env.FIXTURE_CLEANUP === "afterAll") afterAll(() => fleet?.destroy());

test("fails with its hosts busy", async () => {
  const f = fleet!;
  for (const host of f.hosts) host.spawn(["sh", "-c", "sleep 1000 & setsid sleep 1000 & wait"]);
  const pids = await waitUntil(() => {
    const all = f.hosts.map((h) => h.processes());
    return all.every((p) => p.length >= 3) ? all.flat() : undefined;
  }, 10_000);
  f.hosts[0]!.partition();
  console.log(JSON.stringify({ tag: f.tag, dir: f.dir, clusterDir: f.cluster?.dir, namespaces: f.hosts.map((h) => h.namespace).filter(Boolean), bridge: f.bridge, pids }));
  expect("midway").toBe("the end");
});
