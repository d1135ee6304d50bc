/**
 * Clock jumps (issue 13 item 10, lease part) and skewed clocks (issue 27
 * N1: resume never takes over a live local driver), with libfaketime (Debian's
 * `faketime`; scripts/test.sh installs it): a stepped wall clock neither
 * makes a live run's driver give up its lease nor makes `atomic runs` call
 * it crashed. The driver's own deadline is monotonic (lease-keeper.ts) and
 * its renewals are fenced by epoch, not by time; `runs` trusts a live,
 * running holder on this host (same pid and start time) over the clocks
 * (journal/run-status.ts). Through dist/atomic; the root's clock is moved
 * through FAKETIME_TIMESTAMP_FILE while it runs. On SQLite and, in the
 * Postgres pass (ATOMIC_TEST_JOURNAL=postgres), on Postgres, where the
 * database's clock writes and judges leases.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { removeStaleFaketimeSegments } from "../helpers/faketime.ts";
import { runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, makeTempDir } from "../e2e/support.ts";
import { journalOf } from "../helpers/postgres.ts";
import { openJournal } from "../../src/journal/open.ts";

afterEach(cleanupWhenIdle);
afterAll(async () => {
  await cleanupNow();
  removeStaleFaketimeSegments();
});

/** The Postgres pass (ATOMIC_TEST_JOURNAL=postgres): every home's journal is a schema in the test cluster. */
const onPostgres = process.env.ATOMIC_TEST_JOURNAL === "postgres";

const LIB = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"].find((p) => existsSync(p));

/** The environment that runs a process under libfaketime, its offset read from `file` on every call. */
function fakeClock(file: string, offset: string): Record<string, string> {
  writeFileSync(file, `${offset}\n`);
  return { LD_PRELOAD: LIB!, FAKETIME_TIMESTAMP_FILE: file, FAKETIME_NO_CACHE: "1", FAKETIME_DONT_FAKE_MONOTONIC: "1" };
}

async function statusOf(home: string, env: Record<string, string> = {}): Promise<string> {
  const r = await runAtomic(["runs", "--json"], { home, env });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout.trim().split("\n")[0]!).status;
}

if (LIB) {
  e2eTest("atomic runs with its own clock ten minutes ahead still shows a live run as running, not crashed", async () => {
    const home = makeTempDir();
    const dir = makeTempDir();
    const run = spawnAtomic(["run", fixture("journal-swap.ts"), "--input", `dir=${dir}`, "--input", `home=${home}`], { home });
    await waitUntil(() => existsSync(join(dir, "started")), 30_000, "the stage to start");
    const clock = join(makeTempDir(), "offset");
    expect(await statusOf(home, fakeClock(clock, "+10m"))).toBe("running");
    writeFileSync(join(dir, "gate"), "");
    expect(await run.exited).toBe(0);
  });

  e2eTest("the root's clock stepped back ten minutes, then forward: it keeps its lease, runs shows it running, and it completes", async () => {
    const home = makeTempDir();
    const dir = makeTempDir();
    const clock = join(makeTempDir(), "offset");
    // A short lease: several renewals (every second) happen under each offset.
    const run = spawnAtomic(["run", fixture("journal-swap.ts"), "--input", `dir=${dir}`, "--input", `home=${home}`, "--lease-ms", "3000"], {
      home,
      env: fakeClock(clock, "+0"),
    });
    const out = Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text()]);
    await waitUntil(() => existsSync(join(dir, "started")), 30_000, "the stage to start");
    writeFileSync(clock, "-10m\n");
    if (onPostgres) {
      // Postgres writes renewals with the database's clock: renewals after the step show the driver went on.
      const stepped = Date.now();
      await waitUntil(async () => (await leaseRenewedAt(home)) > stepped + 1_000, 20_000, "a renewal under the stepped-back clock");
    } else {
      // Renewed under the stepped-back clock: the lease row says it was last renewed ten minutes ago.
      await waitUntil(async () => Date.now() - 5 * 60_000 > (await leaseRenewedAt(home)), 20_000, "a renewal under the stepped-back clock");
    }
    expect(await statusOf(home)).toBe("running");
    writeFileSync(clock, "+10m\n");
    const steppedAhead = Date.now();
    // Renewed under the stepped-forward clock, then again a lease's length (3 s) later: renewals go on.
    const ahead = (await waitUntil(async () => {
      const at = await leaseRenewedAt(home);
      return (onPostgres ? at > steppedAhead + 1_000 : at > Date.now() + 5 * 60_000) ? at : 0;
    }, 20_000, "a renewal under the stepped-forward clock"))!;
    await waitUntil(async () => (await leaseRenewedAt(home)) >= ahead + 3_000, 20_000, "renewals a lease's length after the step");
    expect(await statusOf(home)).toBe("running");
    writeFileSync(join(dir, "gate"), "");
    const code = await run.exited;
    const [stdout, stderr] = await out;
    expect(stderr).not.toMatch(/lease/);
    expect(code).toBe(0);
    expect(stdout).toMatch(/"text": "done"/);
  });
}

/**
 * Ownership does not depend on the clocks agreeing (issue 27 N1): a driver
 * alive on this host is never taken over by `resume`, whichever of the two
 * clocks is off, and `runs` says the same (running). The lease is short
 * (3 s) so that the minute of skew makes it look long expired (or, with
 * the driver ahead, valid a minute longer than it is).
 */
for (const [who, driverOffset, resumeOffset] of [
  ["the driver's clock a minute behind, resume on the true clock", "-1m", "+0"],
  ["the driver on the true clock, resume with its clock a minute ahead", "+0", "+1m"],
  ["the driver's clock a minute ahead, resume on the true clock", "+1m", "+0"],
  ["the driver on the true clock, resume with its clock a minute behind", "+0", "-1m"],
] as const) {
  if (!LIB) break;
  e2eTest(`${who}: resume refuses to take over the live driver, runs shows it running, and the run completes`, async () => {
    const home = makeTempDir();
    const dir = makeTempDir();
    const run = spawnAtomic(["run", fixture("journal-swap.ts"), "--input", `dir=${dir}`, "--input", `home=${home}`, "--lease-ms", "3000"], {
      home,
      env: fakeClock(join(makeTempDir(), "offset"), driverOffset),
    });
    const out = Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text()]);
    await waitUntil(() => existsSync(join(dir, "started")), 30_000, "the stage to start");
    const id = await runIdIn(home);
    const skewed = fakeClock(join(makeTempDir(), "offset"), resumeOffset);
    const resumed = await runAtomic(["resume", id], { home, env: skewed });
    expect(resumed.code).toBe(2);
    expect(resumed.stderr).toContain(`run ${id} is being driven by another process`);
    expect(await statusOf(home, skewed)).toBe("running");
    writeFileSync(join(dir, "gate"), "");
    const code = await run.exited;
    const [stdout, stderr] = await out;
    expect(stderr).not.toMatch(/lease/);
    expect(code).toBe(0);
    expect(stdout).toMatch(/"text": "done"/);
  });
}

async function runIdIn(home: string): Promise<string> {
  const r = await runAtomic(["runs", "--json"], { home });
  return JSON.parse(r.stdout.trim().split("\n")[0]!).id;
}

/**
 * The lease's renewedAt as recorded: on SQLite the journal file read directly, read-only (the driver's wall
 * clock wrote it); on Postgres through the journal (the database's clock wrote it).
 */
async function leaseRenewedAt(home: string): Promise<number> {
  if (onPostgres) {
    const journal = await openJournal({ home, durability: "full", ...journalOf(home) });
    try {
      const [run] = await journal.listRuns({ limit: 1 });
      return (run && (await journal.getLease(run.id))?.renewedAt) ?? Date.now();
    } finally {
      await journal.close();
    }
  }
  const { Database } = await import("bun:sqlite");
  const db = new Database(join(home, "atomic.db"), { readonly: true });
  try {
    const row = db.query<{ renewed_at: number }, []>("select renewed_at from leases order by renewed_at desc limit 1").get();
    return row?.renewed_at ?? Date.now();
  } finally {
    db.close();
  }
}
