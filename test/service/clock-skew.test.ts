/**
 * The service never takes over a driver alive on its host, whatever the
 * clocks say (issue 27 N1; docs/guides/durability.md, "Clocks"): with
 * libfaketime, a run's driver (`atomic run`) whose wall clock is a minute
 * behind the service's, or a service whose clock is a minute ahead of the
 * driver's, makes the driver's lease (30 s) look long expired to the
 * service. The service judges the run as `atomic runs` does (a live holder
 * on this host, same pid and start time, is running:
 * journal/run-status.ts), so it starts no drive for it; the run completes
 * under its own driver with no lease lost, each step's side effect once.
 * On SQLite and, in the Postgres pass, on Postgres (where the database's
 * clock judges leases anyway). test/recovery/clock-jump.test.ts has the same
 * for `atomic resume` and `atomic runs`.
 */

import { afterAll, expect, test } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { removeStaleFaketimeSegments } from "../helpers/faketime.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { UNINTERRUPTED, countsByStep, drivesOf, newSetup, runIdOf, serviceCleanup, show, startRun, startService, twoScansLater } from "./support.ts";

serviceCleanup();
afterAll(() => removeStaleFaketimeSegments());

const LIB = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"].find((p) => existsSync(p));

/** The environment that runs a process (and what it starts) under libfaketime, `offset` from the true clock. */
function fakeClock(offset: string): Record<string, string> {
  const file = join(makeTempDir("atomic-clock-"), "offset");
  writeFileSync(file, `${offset}\n`);
  return { LD_PRELOAD: LIB!, FAKETIME_TIMESTAMP_FILE: file, FAKETIME_NO_CACHE: "1", FAKETIME_DONT_FAKE_MONOTONIC: "1" };
}

for (const [who, driverOffset, serviceOffset] of [
  ["the driver's clock a minute behind the service's", "-1m", "+0"],
  ["the service's clock a minute ahead of the driver's", "+0", "+1m"],
] as const) {
  test.skipIf(!LIB)(`${who}: the service does not take over the live driver; runs shows it running; the run completes once`, async () => {
    const s = newSetup();
    const run = startRun(s, "gate", undefined, fakeClock(driverOffset));
    const stderr = new Response(run.proc.stderr).text();
    const runId = await runIdOf(run.out);
    await run.out.waitFor(/at the gate/);
    const clock = fakeClock(serviceOffset);
    const service = startService(s, [], clock);
    await service.log.waitFor(/"type":"service_active"/);
    // Whole scans of the service went by with the run's lease looking expired by its clock: nothing taken over.
    await twoScansLater(service);
    expect(service.events("drive_started")).toEqual([]);
    expect(drivesOf(s)).toEqual([]);
    const runs = await runAtomic(["--home", s.home, "runs", "--json"], { home: s.home, env: clock });
    expect(runs.stdout.trim().split("\n").map((l) => JSON.parse(l)).find((r) => r.id === runId)?.status).toBe("running");

    writeFileSync(s.gateFile, "open");
    expect(await run.proc.exited).toBe(0);
    const done = await show(s, runId);
    expect(done.run.status).toBe("completed");
    expect(done.run.outputs).toEqual(UNINTERRUPTED);
    expect(countsByStep(s, runId)).toEqual({ a: 1, b: 1, gate: 1, c: 1 });
    expect(service.events("drive_started")).toEqual([]);
    expect(await stderr).not.toMatch(/lease/);
  }, 120_000);
}
