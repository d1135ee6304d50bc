/**
 * Postgres outages at several points of a stage's life on a worker host
 * (`atomic worker`, the real binary) that serves a root without workers of
 * its own (`atomic run --workers 0`), on a cluster of this file's own
 * (`pg_ctl stop -m immediate`, started again on the same port). The root
 * is given a retry window longer than each outage, so it rides them out;
 * test/fleet/host-outage.test.ts has the root that stops within its window
 * (the bound, the hint, SIGTERM) and the host restarted on its outbox.
 * Each stage waits at a gate the test opens (fixtures/gated.ts), so an
 * outage starts exactly where the test wants it:
 * - mid-stage, through heartbeats and lease renewals, and at the commit of
 *   a result (the host's default window: the commit is retried): the run
 *   completes, each stage's side effect once, each stage recorded once;
 * - at the commit, past the host's window (the result kept in its outbox)
 *   and at the claim of the next stage: the host, never restarted, commits
 *   its outbox and claims the next stage by itself once the server is back;
 * - longer than the work lease: the host stops its own stage at its lease
 *   deadline and, once the server is back, reclaims the item (the next
 *   generation) and runs it again: the stage is retried, its side effect
 *   (past the gate) still happens once;
 * - no outage but every connection of the database ended
 *   (`pg_terminate_backend`: the host's pool and its LISTEN connection, the
 *   root's) mid-stage, at a result's commit and after the next claim: the
 *   run completes, each stage once.
 * - the server crashed right after the root enqueued a stage, before any
 *   host claimed it (the root stopped at that moment by a fault point, the
 *   server's WAL writer held so nothing else writes the commit out): the
 *   item is still there after the crash, and a host started then runs it.
 *   The enqueue used to commit without waiting for the disk, and the root
 *   then waited for good for an item the database had lost.
 * In every case the journal URL's password is never printed (the cluster's
 * URLs carry one) and the host's process is the one started first.
 * Durations are never asserted.
 */

import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { createDatabase, startCluster, withDatabase, type Cluster } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { FIXTURES, cleanUpHosts, counts, marks, startHost, type HostOptions } from "./support.ts";

const WF = join(FIXTURES, "gated.ts");
let cluster: Cluster;

beforeAll(async () => {
  cluster = await startCluster();
});
afterEach(cleanUpHosts);
afterAll(() => cluster.stop());

/** A host (`host` options) and a root running `stages` gated stages on it; the root outlasts any outage here. */
async function setup(stages: number, host: Omit<HostOptions, "url" | "id">) {
  const url = await createDatabase(cluster, `hp_${Math.random().toString(36).slice(2, 8)}`);
  const dir = makeTempDir("atomic-host-points-");
  const home = join(dir, "root");
  const h = await startHost({ url, id: "h", ...host, env: { ATOMIC_POOL_TRACE: "1", ...host.env } });
  const run = spawnAtomic(["run", WF, "--workers", "0", "--json", "--input", `stages=${stages}`, "--input", `dir=${dir}`], {
    home,
    env: { ATOMIC_JOURNAL: url, ATOMIC_JOURNAL_RETRY_MS: "120000" },
  });
  const out = lineWatcher(run.stdout);
  const err = lineWatcher(run.stderr);
  const lines = (name: string) => marks(join(dir, name));
  return {
    url,
    dir,
    home,
    host: h,
    run,
    out,
    err,
    started: () => lines("started"),
    effects: () => lines("marks"),
    open: (stage: string) => writeFileSync(join(dir, `gate-${stage}`), ""),
    /** The host's pool-trace lines of one event (ATOMIC_POOL_TRACE: `complete` a result reached the host coordinator, `committed` it is in the journal). */
    traced: (event: string) => h.log.lines.filter((l) => l.startsWith(`pool-trace ${event} `)),
  };
}

/** The run completed with every stage's output; each stage's side effect happened once and each stage is recorded once. */
async function expectCompletedOnce(s: Awaited<ReturnType<typeof setup>>, stages: number) {
  expect(await s.run.exited).toBe(0);
  await waitUntil(() => s.out.ended && s.err.ended, 10_000, "the root's output to end");
  const result = s.out.lines.map((l) => JSON.parse(l)).find((e) => e.type === "result");
  const names = Array.from({ length: stages }, (_, i) => `s${i}`);
  expect(result.outputs).toEqual(names.map((n) => `out-${n}`));
  expect([...counts(s.effects()).entries()].sort()).toEqual(names.map((n) => [`${n} h`, 1]));
  const show = JSON.parse((await runAtomic(["show", result.runId, "--json"], { home: s.home, env: { ATOMIC_JOURNAL: s.url } })).stdout);
  const recorded = show.steps.filter((x: Record<string, any>) => x.kind === "stage");
  expect(recorded.map((x: Record<string, any>) => [x.name, x.status]).sort()).toEqual(names.map((n) => [n, "completed"]));
  // The password of the journal's URL appears nowhere, on the root or the host.
  const password = decodeURIComponent(new URL(s.url).password);
  expect(password.length).toBeGreaterThan(0);
  expect(`${s.out.text()}\n${s.err.text()}\n${s.host.log.text()}`).not.toContain(password);
  expect(s.host.log.text()).not.toContain("[redacted]");
  // The host rode the outage out: the process started first is still running.
  expect(s.host.processes()).toContain(s.host.proc.pid);
}

test("an outage mid-stage (heartbeats and lease renewals failing) and at a result's commit: the host retries, the run completes, each stage once", async () => {
  const s = await setup(2, { slots: 2 });
  await waitUntil(() => s.started().length === 2, 60_000, "both stages running on the host");
  cluster.stopServer();
  try {
    // Two seconds into the outage the host says the server is unreachable: its heartbeats and renewals fail.
    const said = await s.host.log.waitFor(/the journal's Postgres at \S+ is unreachable .*; retrying for up to \d+ s more/, 30_000);
    expect(said).toContain(`at ${new URL(s.url).host} is unreachable`);
    // s0 ends during the outage: its result reaches the host coordinator, whose commit cannot go through yet.
    s.open("s0");
    await waitUntil(() => s.traced("complete").length === 1, 30_000, "s0's result at the host coordinator");
    expect(s.traced("committed")).toEqual([]);
  } finally {
    cluster.startServer();
  }
  // Back: the commit retried within the host's window goes through; s1, running all along, finishes.
  await s.host.log.waitFor(/the journal's Postgres at \S+ is reachable again/, 60_000);
  await waitUntil(() => s.traced("committed").length === 1, 60_000, "s0's result committed");
  s.open("s1");
  await expectCompletedOnce(s, 2);
  expect(s.started().sort()).toEqual(["s0", "s1"]);
  expect(s.host.log.text()).not.toMatch(/kept in the outbox|reclaimed work/);
}, 150_000);

test("an outage at a result's commit past the host's window and at the next claim: the host keeps the result in its outbox, then commits it and claims the next stage by itself", async () => {
  // One slot: the other stage waits in the queue until the first one's worker is free. The host gives up a statement after 1 s.
  const s = await setup(2, { slots: 1, env: { ATOMIC_JOURNAL_RETRY_MS: "1000" } });
  await waitUntil(() => s.started().length === 1, 60_000, "a first stage running on the host");
  const first = s.started()[0]!;
  const next = first === "s0" ? "s1" : "s0";
  cluster.stopServer();
  try {
    s.open(first);
    await s.host.log.waitFor(/result of work \S+ kept in the outbox until the journal takes it/, 30_000);
    // Its worker is free: the host tries to claim the next stage and cannot.
    await s.host.log.waitFor(/dispatch failed/, 30_000);
    expect(s.started()).toEqual([first]);
  } finally {
    cluster.startServer();
  }
  // Back: the same host process commits what its outbox kept and claims the next stage, nobody restarting it.
  await s.host.log.waitFor(/committed the result of work \S+ from the outbox/, 60_000);
  await waitUntil(() => s.started().length === 2, 60_000, "the next stage claimed after the outage");
  s.open(next);
  await expectCompletedOnce(s, 2);
  expect(s.started()).toEqual([first, next]);
}, 150_000);

test("an outage longer than the work lease: the host stops its own stage at the lease's deadline, then reclaims the item and runs it again; its side effect happens once", async () => {
  const s = await setup(1, { slots: 1, leaseMs: 3_000 });
  await waitUntil(() => s.started().length === 1, 60_000, "s0 running on the host");
  cluster.stopServer();
  try {
    await waitUntil(() => workerLogs(s.host.home).includes("its lease could not be renewed by its deadline; killing the stage"), 60_000, "the host to stop its stage");
  } finally {
    cluster.startServer();
  }
  // Back: the expired lease is reaped (the next generation, by the host or the root) and the host runs the stage again.
  await waitUntil(() => s.started().length === 2, 60_000, "s0 started again");
  s.open("s0");
  await expectCompletedOnce(s, 1);
  expect(s.started()).toEqual(["s0", "s0"]);
}, 150_000);

test("every connection terminated mid-stage, at a result's commit and after the next claim: the run completes, each stage once", async () => {
  const s = await setup(2, { slots: 1 });
  const admin = new pg.Client({ connectionString: cluster.adminUrl });
  await admin.connect();
  const db = new URL(s.url).pathname.slice(1);
  const terminate = async () =>
    (await admin.query<{ n: number }>("select count(*)::int as n from (select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()) t", [db])).rows[0]!.n;
  try {
    await waitUntil(() => s.started().length === 1, 60_000, "a first stage running on the host");
    const first = s.started()[0]!;
    const next = first === "s0" ? "s1" : "s0";
    expect(await terminate()).toBeGreaterThan(0);
    s.open(first);
    await waitUntil(() => s.traced("complete").length === 1, 30_000, "the first result at the host coordinator");
    await terminate();
    await waitUntil(() => s.started().length === 2, 60_000, "the next stage claimed");
    expect(await terminate()).toBeGreaterThan(0);
    s.open(next);
    await expectCompletedOnce(s, 2);
    expect(s.started()).toEqual([first, next]);
  } finally {
    await admin.end();
  }
}, 150_000);

test("the server crashed right after the root enqueued a stage, before any host claimed it: the work item survives, and a host started after runs it once", async () => {
  const url = await createDatabase(cluster, `hp_${Math.random().toString(36).slice(2, 8)}`);
  const dir = makeTempDir("atomic-host-points-");
  const home = join(dir, "root");
  // Held for the rest of this server's life: nothing but a commit that waits for the disk writes the log out.
  const walWriter = serverProcess("walwriter");
  process.kill(walWriter, "SIGSTOP");
  const run = spawnAtomic(["run", WF, "--workers", "0", "--json", "--input", "stages=1", "--input", `dir=${dir}`], {
    home,
    env: { ATOMIC_JOURNAL: url, ATOMIC_JOURNAL_RETRY_MS: "120000", ATOMIC_FAULT_POINTS: "stage-start-recorded:1", ATOMIC_FAULT_ACTION: "stop" },
  });
  const out = lineWatcher(run.stdout);
  const err = lineWatcher(run.stderr);
  let stopped = false;
  try {
    // The root committed s0's start and its work item, and stopped itself before anything else.
    await err.waitFor(/^\[fault\] stage-start-recorded #1: SIGSTOP$/, 60_000);
    stopped = true;
    // A crash: SIGQUIT to every server process, SIGKILL to those (the held WAL writer) that do not end at once.
    cluster.stopServer();
    cluster.startServer();
  } finally {
    if (stopped) run.kill("SIGCONT");
  }
  const admin = new pg.Client({ connectionString: withDatabase(cluster.adminUrl, new URL(url).pathname.slice(1)) });
  await admin.connect();
  try {
    const items = await admin.query<{ stage_key: string; state: string }>("select stage_key, state from atomic.work_items");
    expect(items.rows.map((r) => r.state)).toEqual(["ready"]);
  } finally {
    await admin.end();
  }
  const host = await startHost({ url, id: "h", slots: 1 });
  await waitUntil(() => marks(join(dir, "started")).length === 1, 60_000, "s0 started on the host");
  writeFileSync(join(dir, "gate-s0"), "");
  expect(await run.exited).toBe(0);
  await waitUntil(() => out.ended && err.ended, 10_000, "the root's output to end");
  expect(out.lines.map((l) => JSON.parse(l)).find((e) => e.type === "result").outputs).toEqual(["out-s0"]);
  expect(marks(join(dir, "marks"))).toEqual(["s0 h"]);
  expect(marks(join(dir, "started"))).toEqual(["s0"]);
  expect(host.processes()).toContain(host.proc.pid);
}, 150_000);

/** The pid of one of the cluster's server processes, by its title (`postgres: walwriter`). */
function serverProcess(title: string): number {
  const postmaster = Number(readFileSync(join(cluster.dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === postmaster && readFileSync(`/proc/${name}/cmdline`, "utf8").includes(title)) return Number(name);
    } catch {
      // gone meanwhile
    }
  }
  throw new Error(`no "${title}" process under the cluster's postmaster ${postmaster}`);
}

/** Everything the host's workers logged (their logs are files in its home). */
function workerLogs(home: string): string {
  const dir = join(home, "worker-logs");
  try {
    return readdirSync(dir)
      .map((f) => readFileSync(join(dir, f), "utf8"))
      .join("\n");
  } catch {
    return "";
  }
}
