/**
 * A Postgres outage under a worker host (`atomic worker`, the real binary)
 * running the stages of a root without workers of its own (`--workers 0`),
 * on a cluster of this file's own (`pg_ctl stop -m immediate`, started
 * again later on the same port):
 * - the root stops with storage_unavailable and the Postgres hint, as a
 *   root with its own workers does (test/recovery/postgres-outage.test.ts);
 *   SIGTERM during the outage ends it without waiting out the window;
 * - the host keeps going: its stages finish, and their results, which the
 *   journal cannot take, wait in its outbox; SIGTERM then ends it (exit 0)
 *   without waiting for the journal;
 * - once the server is back, the host started again (same home and id)
 *   commits what its outbox kept, and `atomic resume` completes the run;
 *   only the stages in flight at the outage run again, once (as on the
 *   run's own pool: a resumed drive does not take over the results its
 *   earlier drive's items committed after it stopped).
 * Before the fix in fleet-executor.ts the root never ended: its wait for
 * the stages on the host had nothing to end it while the journal was away.
 * Durations are never asserted.
 */

import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { createDatabase, startCluster, type Cluster } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { FIXTURES, cleanUpHosts, counts, marks, startHost } from "./support.ts";

const WF = join(FIXTURES, "fleet.ts");
let cluster: Cluster;

beforeAll(async () => {
  cluster = await startCluster();
});
afterEach(cleanUpHosts);
afterAll(() => cluster.stop());

test("postgres down under a worker host: the root stops with the Postgres hint; the host's results wait in its outbox, SIGTERM ends it; once back, resume completes", async () => {
  const url = await createDatabase(cluster, `ho_${Math.random().toString(36).slice(2, 8)}`);
  const dir = makeTempDir("atomic-host-outage-");
  const file = join(dir, "marks");
  const home = join(dir, "root");
  // Short retry windows: the host's commits give up quickly (its outbox takes them); the root stops soon.
  const host = await startHost({ url, id: "far", slots: 2, env: { ATOMIC_JOURNAL_RETRY_MS: "1000" } });
  const run = spawnAtomic(["run", WF, "--workers", "0", "--input", "shells=2", "--input", "sleep=3", "--input", `marks=${file}`], {
    home,
    env: { ATOMIC_JOURNAL: url, ATOMIC_JOURNAL_RETRY_MS: "2000" },
  });
  const out = lineWatcher(run.stdout);
  const err = lineWatcher(run.stderr);
  const id = /started run (\S+)/.exec(await out.waitFor(/^started run /, 30_000))![1]!;
  await waitUntil(() => host.processes().filter(isSleeping).length === 2, 30_000, "both stages running on the host");
  cluster.stopServer();
  let restarted = false;
  try {
    expect(await run.exited).not.toBe(0);
    await waitUntil(() => err.ended && out.ended, 10_000, "the root's last words");
    const said = `${out.text()}\n${err.text()}`;
    const u = new URL(url);
    expect(said).toContain(`lost the connection to the journal's Postgres at postgres://${u.username}@${u.host}${u.pathname}`);
    expect(said).toContain(`hint: check that the Postgres server at ${u.host} is up and reachable from this machine, then resume the run: atomic resume ${id}`);
    expect(said).not.toMatch(/free space|writable again|\[redacted\]/);

    // The host's stages finish; the journal away, their results wait in the outbox.
    await waitUntil(() => host.log.lines.filter((l) => /kept in the outbox until the journal takes it/.test(l)).length === 2, 60_000, "both results in the outbox");
    expect(marks(file).sort()).toEqual(["s0 far", "s1 far"]);
    host.proc.kill("SIGTERM");
    expect(await host.exited).toBe(0);

    cluster.startServer();
    restarted = true;
    const again = await startHost({ url, id: "far", slots: 2, home: host.home });
    await waitUntil(() => again.log.lines.filter((l) => /committed the result of work \S+ from the outbox/.test(l)).length === 2, 60_000, "the outbox committed");
    const resumed = await runAtomic(["resume", id, "--json"], { home, env: { ATOMIC_JOURNAL: url }, timeoutMs: 90_000 });
    expect(resumed.code).toBe(0);
    const result = resumed.stdout.trim().split("\n").map((l) => JSON.parse(l)).find((e) => e.type === "result");
    expect(result.outputs.map((x: string) => x.split(" ")[0])).toEqual(["out-s0", "out-s1"]);
    // Only what was in flight ran again, once.
    expect([...counts(marks(file)).entries()].sort()).toEqual([["s0 far", 2], ["s1 far", 2]]);
  } finally {
    if (!restarted) cluster.startServer();
  }
}, 150_000);

test("SIGTERM to a root with --workers 0 during a postgres outage ends it without waiting out the retry window; once back, resume completes", async () => {
  const url = await createDatabase(cluster, `ho_${Math.random().toString(36).slice(2, 8)}`);
  const dir = makeTempDir("atomic-host-outage-");
  const file = join(dir, "marks");
  const home = join(dir, "root");
  const host = await startHost({ url, id: "near", slots: 2 });
  // The default retry window (15 s): SIGTERM must not wait it out.
  const run = spawnAtomic(["run", WF, "--workers", "0", "--input", "shells=2", "--input", "sleep=3", "--input", `marks=${file}`], { home, env: { ATOMIC_JOURNAL: url } });
  const out = lineWatcher(run.stdout);
  const err = lineWatcher(run.stderr);
  const id = /started run (\S+)/.exec(await out.waitFor(/^started run /, 30_000))![1]!;
  await waitUntil(() => host.processes().filter(isSleeping).length === 2, 30_000, "both stages running on the host");
  cluster.stopServer();
  try {
    // Two seconds into the outage the root says it is waiting for the server: then SIGTERM.
    await err.waitFor(/the journal's Postgres at \S+ is unreachable .*; retrying for up to \d+ s more/, 30_000);
    run.kill("SIGTERM");
    expect(await run.exited).not.toBe(0);
    await waitUntil(() => err.ended && out.ended, 10_000, "the root's last words");
    const said = `${out.text()}\n${err.text()}`;
    expect(said).toMatch(/SIGTERM: stopping run/);
    // The window was not used up: the root stopped waiting when told to.
    expect(said).toContain("while this process was stopping");
    expect(said).not.toMatch(/for more than \d+ s/);
    expect(said).toContain(`then resume the run: atomic resume ${id}`);
  } finally {
    cluster.startServer();
  }
  const resumed = await runAtomic(["resume", id, "--json"], { home, env: { ATOMIC_JOURNAL: url }, timeoutMs: 90_000 });
  expect(resumed.code).toBe(0);
  const result = resumed.stdout.trim().split("\n").map((l) => JSON.parse(l)).find((e) => e.type === "result");
  expect(result.outputs.map((x: string) => x.split(" ")[0])).toEqual(["out-s0", "out-s1"]);
  for (const n of counts(marks(file)).values()) expect(n).toBeLessThanOrEqual(2);
}, 150_000);

function isSleeping(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith("sleep");
  } catch {
    return false;
  }
}
