/**
 * A durable sleep taken over by a process with another clock (issue 27),
 * with libfaketime: the driver records a sleep and is killed during it; a
 * resume whose wall clock differs from the driver's resumes it.
 *
 * On Postgres (a resume a minute ahead of the driver's clock, or the
 * driver's a minute behind the true clock) the sleep does not end early:
 * the wake-up is also recorded on the database's clock
 * (engine/steps/sleep.ts), and the resumed sleep waits until that clock
 * reaches it. Before, both ended the sleep at once (the wall clocks said
 * its time had long come). The true wake-up time is the recorded one minus
 * the driver's offset (libfaketime shifts by exactly that); the run may end
 * only after it, by the test's own (true) clock.
 *
 * On SQLite every time in the journal is the writer's own clock, so the
 * bound is the one docs/guides/durability.md states: a resume whose clock
 * runs D ahead ends the sleep early by at most D (here D is a third of the
 * sleep, so a resume that ended it at once would be seen), and one whose
 * clock runs behind does not end it early and waits no longer than its
 * whole duration (ten minutes behind: a wait by the wall clock would
 * outlast the resume's time limit, runAtomic's 60 s, and fail it).
 */

import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { removeStaleFaketimeSegments } from "../helpers/faketime.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const LIB = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"].find((p) => existsSync(p));
const FIXTURE = join(import.meta.dir, "fixtures", "sleeper.ts");
const SLEEP_MS = 6_000;

beforeAll(async () => {
  await testPostgres();
});
afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});
afterAll(() => removeStaleFaketimeSegments());

function fakeClock(offset: string): Record<string, string> {
  const file = join(makeTempDir("atomic-clock-"), "offset");
  writeFileSync(file, `${offset}\n`);
  return { LD_PRELOAD: LIB!, FAKETIME_TIMESTAMP_FILE: file, FAKETIME_NO_CACHE: "1", FAKETIME_DONT_FAKE_MONOTONIC: "1" };
}

interface Case {
  journal: "postgres" | "sqlite";
  who: string;
  driverOffset: string;
  resumeOffset: string;
  /** The driver's clock minus the true clock: the recorded wake-up minus this is the true one. */
  driverSkewMs: number;
  /** How early the bound lets the resumed sleep end, before its true wake-up time. */
  earlyMs: number;
  /** The resume's clock minus the true clock (resumeOffset in ms). */
  resumeSkewMs: number;
  sleepMs: number;
}

const cases: Case[] = [
  { journal: "postgres", who: "the driver on the true clock, the resume a minute ahead", driverOffset: "+0", resumeOffset: "+1m", driverSkewMs: 0, earlyMs: 0, resumeSkewMs: 60_000, sleepMs: SLEEP_MS },
  { journal: "postgres", who: "the driver a minute behind, the resume on the true clock", driverOffset: "-1m", resumeOffset: "+0", driverSkewMs: -60_000, earlyMs: 0, resumeSkewMs: 0, sleepMs: SLEEP_MS },
  { journal: "sqlite", who: "the driver on the true clock, the resume 4 s ahead: early by at most those 4 s", driverOffset: "+0", resumeOffset: "+4", driverSkewMs: 0, earlyMs: 4_000, resumeSkewMs: 4_000, sleepMs: 12_000 },
  { journal: "sqlite", who: "the driver on the true clock, the resume ten minutes behind: not early, and no longer than its duration", driverOffset: "+0", resumeOffset: "-10m", driverSkewMs: 0, earlyMs: 0, resumeSkewMs: -600_000, sleepMs: SLEEP_MS },
];

for (const c of cases) {
  test.skipIf(!LIB)(`${c.journal}: ${c.who}: the resumed sleep ends no earlier than its true wake-up time${c.earlyMs ? " less the resume's lead" : ""}`, async () => {
    const home = makeTempDir("atomic-sleep-");
    const marks = join(home, "marks");
    const env: Record<string, string> = c.journal === "postgres" ? { ATOMIC_JOURNAL: await freshDatabase("sleep") } : {};
    const run = spawnAtomic(["run", FIXTURE, "--json", "--input", `marks=${marks}`, "--input", `ms=${c.sleepMs}`], { home, env: { ...env, ...fakeClock(c.driverOffset) } });
    void new Response(run.stderr).text();
    void new Response(run.stdout).text();
    // The sleep is recorded and under way: kill the driver during it.
    const show = async (id: string) => JSON.parse((await runAtomic(["show", id, "--json"], { home, env })).stdout);
    const runId = await waitUntil(async () => {
      const r = await runAtomic(["runs", "--json"], { home, env });
      return r.stdout.trim() ? (JSON.parse(r.stdout.trim().split("\n")[0]!).id as string) : undefined;
    }, 30_000, "the run to be recorded");
    const sleep = await waitUntil(async () => (await show(runId!)).steps.find((s: { kind: string }) => s.kind === "sleep"), 30_000, "the sleep to be recorded");
    run.kill("SIGKILL");
    await run.exited;
    // The driver's clock was off as the case says (it started the workflow before the kill).
    const driverClock = Number(readFileSync(`${marks}.clocks`, "utf8").split("\n")[0]);
    if (c.driverSkewMs < 0) expect(driverClock).toBeLessThanOrEqual(Date.now() + c.driverSkewMs);
    expect(readFileSync(marks, "utf8")).toBe("before\n");
    const trueWake = sleep.wakeAt - c.driverSkewMs;

    const startedAt = Date.now();
    const resumed = await runAtomic(["resume", runId!], { home, env: { ...env, ...fakeClock(c.resumeOffset) } });
    const endedAt = Date.now();
    // The resume's clock really was off by its offset: the clock it read as it started the workflow lies outside
    // the true window [startedAt, endedAt] by that much (one-sided, so a slow start never fails it).
    const resumeClock = Number(readFileSync(`${marks}.clocks`, "utf8").trim().split("\n").at(-1));
    if (c.resumeSkewMs > 0) expect(resumeClock).toBeGreaterThanOrEqual(startedAt + c.resumeSkewMs);
    if (c.resumeSkewMs < 0) expect(resumeClock).toBeLessThanOrEqual(endedAt + c.resumeSkewMs);
    expect(resumed.stderr).toBe("");
    expect(resumed.code).toBe(0);
    expect(readFileSync(marks, "utf8")).toBe("before\nwoke\n");
    expect(endedAt).toBeGreaterThanOrEqual(trueWake - c.earlyMs);
  }, 90_000);
}
