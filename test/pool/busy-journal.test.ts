/**
 * Journal calls do not stall the event loop (issue 12, item 10), through
 * the real binary: while a run's stage prints a line every 50 ms, a second
 * process takes the journal's write lock and holds it. The coordinator
 * renews its worker's lease on every heartbeat, so its journal calls meet
 * the lock at once; they wait without blocking it, and the stage's output
 * keeps flowing worker → coordinator → root (one `stage_output` line per
 * batch, about every 250 ms) while the lock is held. The lock holder lets
 * go when the test has seen 12 batches arrive during the lock, or on its
 * own after 8 s (below the journal's 10 s busy timeout, so a process that
 * blocked in its wait would neither fail nor forward anything until then);
 * the test asserts the first. The run then completes.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { streamLines } from "../helpers/lines.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";
import { processesWithHome } from "./support.ts";

const ONE = join(import.meta.dir, "fixtures", "one-stage.ts");
const holders: { kill(signal?: number | NodeJS.Signals): void }[] = [];

afterEach(cleanupWhenIdle);
afterAll(async () => {
  for (const h of holders) h.kill("SIGKILL");
  await cleanupNow();
});

/** A process holding the journal's write lock until `release` exists (or `capMs` passed); prints "locked", then how it let go. */
function holdLock(file: string, release: string, capMs: number) {
  const script = `
    import { Database } from "bun:sqlite";
    import { existsSync } from "node:fs";
    const db = new Database(${JSON.stringify(file)});
    db.run("pragma busy_timeout = 10000");
    db.run("begin immediate");
    console.log("locked");
    const until = Date.now() + ${capMs};
    while (!existsSync(${JSON.stringify(release)}) && Date.now() < until) Bun.sleepSync(5);
    const how = existsSync(${JSON.stringify(release)}) ? "released-on-request" : "released-on-its-own";
    db.run("rollback");
    db.close();
    console.log(how);
  `;
  const proc = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "inherit" });
  holders.push(proc);
  return proc;
}

// SQLite's write lock and its busy waits (busy.ts); on Postgres (ATOMIC_TEST_JOURNAL=postgres) a journal call awaits
// the server like any other, and work-lease-deadline.test.ts holds the work queue's table lock through the binary.
const sqliteJournal = process.env.ATOMIC_TEST_JOURNAL !== "postgres";

(sqliteJournal ? e2eTest : ((() => {}) as unknown as typeof e2eTest))("a second process holds the journal's write lock: live output keeps flowing to the root meanwhile, and the run completes after", async () => {
  const home = makeTempDir();
  const d = makeTempDir();
  const command = `i=0; while [ ! -f ${d}/gate ]; do i=$((i+1)); echo tick $i; sleep 0.05; done; echo done`;
  const run = spawnAtomic(["--json", "run", ONE, "--input", `command=${command}`, "--workers", "1"], { home });
  const out = lineWatcher(run.stdout);
  await out.waitFor(/"type":"stage_output".*tick/);

  const holder = holdLock(join(home, "atomic.db"), join(d, "release"), 8_000);
  const said: string[] = [];
  const reading = (async () => {
    for await (const lines of streamLines(holder.stdout)) said.push(...lines);
  })();
  await waitUntil(() => said.includes("locked"), 20_000, "the second process to hold the write lock");
  const before = out.lines.length;
  const batchesSince = () => out.lines.slice(before).filter((l) => /"type":"stage_output"/.test(l)).length;
  await waitUntil(() => batchesSince() >= 12 || said.some((l) => l.startsWith("released")), 30_000, "12 output batches, or the lock let go");
  writeFileSync(join(d, "release"), "");
  expect(await holder.exited).toBe(0);
  await reading;
  expect(said).toContain("released-on-request");

  writeFileSync(join(d, "gate"), "");
  expect(await run.exited).toBe(0);
  await waitUntil(() => processesWithHome(home).length === 0, 15_000, "every process of the run to exit");
  expect(existsSync(join(home, "atomic.db"))).toBe(true);
});
