/**
 * `atomic serve`'s service flags through the binary: `--no-recover` serves
 * the page and leaves a crashed run alone (GET /api/service lists no
 * recovery duty), `--no-schedules` is accepted, `--max-runs` limits the
 * drives at once, and a bad `--max-runs`, `--workers`, `--work-lease-ms` or
 * `--lease-ms` (handed to its drives) is one sentence and a hint (exit 2) before anything listens.
 */

import { expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { runAtomic, waitUntil } from "../helpers/atomic.ts";
import { journalUrlForHome } from "../helpers/postgres.ts";
import { openJournal } from "../../src/journal/open.ts";
import { serviceLeaseKey } from "../../src/service/service-lease.ts";
import { countsByStep, drivesOf, kill9, newSetup, runIdOf, serviceCleanup, show, startRun, startService, twoScansLater, untilStatus } from "./support.ts";

serviceCleanup();

test("serve --no-recover --no-schedules: the page, no recovery; a crashed run stays crashed", async () => {
  const s = newSetup();
  const service = startService(s, ["--no-recover", "--no-schedules"]);
  const serving = JSON.parse(await service.log.waitFor(/"type":"serving"/)) as { url: string; tokenFile: string; duties: string[] };
  expect(serving.duties).toEqual([]);
  await service.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "gate");
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  const token = (await Bun.file(serving.tokenFile).text()).trim();
  const res = await fetch(new URL("/api/service", serving.url), { headers: { Authorization: `Bearer ${token}` } });
  expect(await res.json()).toMatchObject({ state: "active", duties: [], active: { self: true } });
  // The service renewed its lease after the run crashed: it was active all that time, and left the run alone.
  const crashedAt = Date.now();
  const journal = await openJournal({ home: s.home, durability: "full", journalUrl: journalUrlForHome(s.home) });
  try {
    await waitUntil(async () => ((await journal.getLease(serviceLeaseKey()))?.renewedAt ?? 0) > crashedAt, 30_000, "the service to renew its lease");
  } finally {
    await journal.close();
  }
  expect(service.events("drive_started")).toEqual([]);
  expect((await show(s, runId)).status).toBe("crashed");
}, 120_000);

test("--max-runs 1: two crashed runs are driven one after the other, never both at once", async () => {
  const s = newSetup();
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    const run = startRun(s, "gate");
    ids.push(await runIdOf(run.out));
    await run.out.waitFor(/at the gate/);
    await kill9(run.proc);
  }
  const service = startService(s, ["--max-runs", "1"]);
  // One drive reaches the gate and waits there; the other run waits for the slot.
  await waitUntil(() => ids.some((id) => countsByStep(s, id).gate === 2), 60_000, "a drive at the gate");
  await twoScansLater(service);
  expect(service.events("drive_started").length).toBe(1);
  expect(drivesOf(s).length).toBe(1);
  writeFileSync(s.gateFile, "open");
  for (const id of ids) await untilStatus(s, id, "completed");
  // A run is completed before the service has seen its drive's process end: wait for the second drive_ended.
  await waitUntil(() => service.events("drive_ended").length === 2, 30_000, "the second drive to end");
  const order = service.log.lines.filter((l) => /"type":"drive_(started|ended)"/.test(l)).map((l) => JSON.parse(l).type as string);
  expect(order).toEqual(["drive_started", "drive_ended", "drive_started", "drive_ended"]);
  for (const id of ids) expect(countsByStep(s, id)).toEqual({ a: 1, b: 1, gate: 2, c: 1 });
}, 120_000);

test("serve --max-runs 0 is one sentence and a hint, exit 2", async () => {
  const s = newSetup();
  const r = await runAtomic(["--home", s.home, "serve", "--port", "0", "--max-runs", "0"], { home: s.home });
  expect(r.code).toBe(2);
  expect(r.stderr).toBe('error: --max-runs must be a whole number from 1 to 1000, got "0".\nhint: the default is 4\n');
  expect(r.stdout).toBe("");
});

test("serve --workers, --work-lease-ms and --lease-ms for its drives: a bad value is one sentence and a hint, exit 2, before anything listens", async () => {
  const s = newSetup();
  for (const [flag, value, said] of [
    ["--workers", "two", 'error: --workers must be a whole number, got "two".\nhint: for example --workers 0\n'],
    ["--work-lease-ms", "1000", "error: --work-lease-ms must be between 2000 (two heartbeats of 1000 ms) and 86400000, got 1000.\nhint: for example --work-lease-ms 2000\n"],
    ["--lease-ms", "10", 'error: --lease-ms must be a whole number of milliseconds of at least 1000, got "10".\nhint: for example --lease-ms 30000 (the default)\n'],
  ] as const) {
    const r = await runAtomic(["--home", s.home, "serve", "--port", "0", flag, value], { home: s.home });
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(said);
    expect(r.stdout).toBe("");
  }
});
