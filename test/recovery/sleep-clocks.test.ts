/**
 * A durable sleep taken over by a process with another clock (issue 27),
 * on Postgres, with libfaketime: the driver records a sleep and is killed
 * during it; a resume whose wall clock differs by a minute (ahead of the
 * driver's, or the driver's behind the true clock) does not end the sleep
 * early: the wake-up is also recorded on the database's clock
 * (engine/steps/sleep.ts), and the resumed sleep waits until that clock
 * reaches it. Before, both ended the sleep at once (the wall clocks said
 * its time had long come). The true wake-up time is the recorded one
 * minus the driver's offset (libfaketime shifts by exactly that); the run
 * may end only after it, by the test's own (true) clock.
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

const cases = [
  ["the driver on the true clock, the resume a minute ahead", "+0", "+1m", 0],
  ["the driver a minute behind, the resume on the true clock", "-1m", "+0", -60_000],
] as const;

for (const [who, driverOffset, resumeOffset, driverSkewMs] of cases) {
  test.skipIf(!LIB)(`postgres: ${who}: the resumed sleep ends no earlier than its true wake-up time`, async () => {
    const url = await freshDatabase("sleep");
    const home = makeTempDir("atomic-sleep-");
    const marks = join(home, "marks");
    const env = { ATOMIC_JOURNAL: url };
    const run = spawnAtomic(["run", FIXTURE, "--json", "--input", `marks=${marks}`, "--input", `ms=${SLEEP_MS}`], { home, env: { ...env, ...fakeClock(driverOffset) } });
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
    expect(readFileSync(marks, "utf8")).toBe("before\n");
    const trueWake = sleep.wakeAt - driverSkewMs;

    const resumed = await runAtomic(["resume", runId!], { home, env: { ...env, ...fakeClock(resumeOffset) } });
    const endedAt = Date.now();
    expect(resumed.code).toBe(0);
    expect(readFileSync(marks, "utf8")).toBe("before\nwoke\n");
    expect(endedAt).toBeGreaterThanOrEqual(trueWake);
  }, 90_000);
}
