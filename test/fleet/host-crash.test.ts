/**
 * Worker host crashes: every process of a host killed with SIGKILL during a
 * fan-out, at ten different moments (fault points in the host coordinator:
 * after a claim, after a stage ended but before its commit, after the commit
 * before the root was woken; by time: mid-stage; with results waiting in
 * its outbox: during the drain). Another host reclaims the items once their
 * 2 s leases expire; the run completes with the outputs an uninterrupted
 * run gives, each stage recorded once. A stage that keeps killing its
 * host fails with worker_retry_limit. A Postgres restart while three hosts
 * are busy loses nothing either.
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { createDatabase, freshDatabase, startCluster, testPostgres, type Cluster } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { FIXTURES, cleanUpHosts, counts, marks, startHost, type TestHost } from "./support.ts";

const WF = join(FIXTURES, "fleet.ts");
const LEASE = 2_000;
const STAGES = 12;

beforeAll(async () => {
  await testPostgres();
});
afterEach(cleanUpHosts);

interface Outcome {
  code: number;
  outputs: string[];
  marks: string[];
  steps: Record<string, any>[];
}

/** A fan-out of STAGES stages on host "a" (armed with `faults`, killed whole once `killWhen` says so) and host "b". */
async function fanOut(url: string, opts: { faults?: string; killWhen: (a: TestHost, file: string) => boolean; sleep?: string; home?: string }): Promise<Outcome> {
  const dir = makeTempDir("atomic-crash-");
  const file = join(dir, "marks");
  const a = await startHost({ url, id: "a", slots: 2, leaseMs: LEASE, ...(opts.faults ? { env: { ATOMIC_FAULT_POINTS: opts.faults } } : {}) });
  const home = opts.home ?? join(dir, "root");
  const run = spawnAtomic(
    ["run", WF, "--workers", "0", "--json", "--work-lease-ms", String(LEASE), "--input", `shells=${STAGES}`, "--input", `sleep=${opts.sleep ?? "0.2"}`, "--input", `marks=${file}`],
    { home, env: { ATOMIC_JOURNAL: url } },
  );
  const out = lineWatcher(run.stdout);
  await waitUntil(() => opts.killWhen(a, file), 60_000, "the moment to kill host a");
  a.kill();
  await a.exited;
  // The other host comes up only now: everything left is its to reclaim.
  await startHost({ url, id: "b", slots: 2, leaseMs: LEASE });
  const code = await run.exited;
  await waitUntil(() => out.ended, 5_000, "the run's output to end");
  const result = out.lines.map((l) => JSON.parse(l)).find((e) => e.type === "result");
  const show = await runAtomic(["show", result.runId, "--json"], { home, env: { ATOMIC_JOURNAL: url } });
  return { code, outputs: result.outputs, marks: marks(file), steps: JSON.parse(show.stdout).steps };
}

function expectComplete(o: Outcome): void {
  expect(o.code).toBe(0);
  // Outputs equal an uninterrupted run's (each stage's own line, in order).
  expect(o.outputs.map((x) => x.split(" ")[0])).toEqual(Array.from({ length: STAGES }, (_, i) => `out-s${i}`));
  // Each stage recorded once, and ran at least once (a stage the kill interrupted may have run twice).
  const stages = o.steps.filter((s) => s.kind === "stage");
  expect(stages.length).toBe(STAGES);
  expect(new Set(stages.map((s) => s.name)).size).toBe(STAGES);
  expect(stages.every((s) => s.status === "completed")).toBe(true);
  const ran = counts(o.marks.map((l) => l.split(" ")[0]!));
  expect(ran.size).toBe(STAGES);
}

const faultMoments: [string, string][] = [
  ["after its first claim", "coordinator-after-claim:1"],
  ["after its third claim", "coordinator-after-claim:3"],
  ["after a stage ended, before its commit", "coordinator-before-commit:1"],
  ["after the fourth stage ended, before its commit", "coordinator-before-commit:4"],
  ["after a commit, before the root was woken", "coordinator-before-work-done:1"],
  ["after the fifth commit, before the root was woken", "coordinator-before-work-done:5"],
];

describe("a worker host killed whole during a fan-out", () => {
  for (const [moment, faults] of faultMoments) {
    test(`${moment}: another host finishes the run, nothing lost or recorded twice`, async () => {
      const url = await freshDatabase("crash");
      const o = await fanOut(url, { faults, killWhen: (a) => a.log.text().includes("[fault]") || a.processes().length === 0 });
      expectComplete(o);
    }, 90_000);
  }

  for (const n of [1, 4]) {
    test(`mid-stage (after ${n} stage(s) started there): another host finishes the run`, async () => {
      const url = await freshDatabase("crash");
      const o = await fanOut(url, { sleep: "1", killWhen: (_a, file) => marks(file).length >= n - 1 && _a.processes().some((p) => isSleeping(p)) });
      expectComplete(o);
    }, 90_000);
  }

  test("a stage that kills its host three times fails with worker_retry_limit", async () => {
    const url = await freshDatabase("crash");
    const dir = makeTempDir("atomic-crash-");
    const home = join(dir, "root");
    const run = spawnAtomic(["run", WF, "--workers", "0", "--json", "--work-lease-ms", String(LEASE), "--input", "shells=1", "--input", "sleep=30", "--input", `marks=${join(dir, "m")}`], {
      home,
      env: { ATOMIC_JOURNAL: url },
    });
    const out = lineWatcher(run.stdout);
    for (let i = 0; i < 3; i++) {
      const h = await startHost({ url, id: `k${i}`, slots: 1, leaseMs: LEASE });
      await waitUntil(() => h.processes().some((p) => isSleeping(p)), 30_000, "the stage running");
      h.kill();
      await h.exited;
    }
    expect(await run.exited).toBe(1);
    const result = out.lines.map((l) => JSON.parse(l)).find((e) => e.type === "result");
    expect(JSON.stringify(result)).toContain("worker_retry_limit");
  }, 120_000);
});

describe("results in a host's outbox", () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster();
  });
  afterAll(() => cluster.stop());

  for (const fault of ["outbox-before-commit:1", "outbox-after-commit:1"]) {
    test(`the database away at the commit, then the host killed during the drain (${fault}): committed once when it comes back`, async () => {
      const dir = makeTempDir("atomic-outbox-");
      const file = join(dir, "marks");
      const url = await createDatabase(cluster, `o_${Math.random().toString(36).slice(2, 8)}`);
      // The host gives up on a commit after half a second (its outbox takes it); the root waits out the outage.
      const hostEnv = { ATOMIC_JOURNAL_RETRY_MS: "500", ATOMIC_FAULT_POINTS: fault };
      const a = await startHost({ url, id: "box", slots: 1, env: hostEnv });
      const run = spawnAtomic(["run", WF, "--workers", "0", "--json", "--input", "shells=1", "--input", "sleep=1.5", "--input", `marks=${file}`], {
        home: join(dir, "root"),
        env: { ATOMIC_JOURNAL: url },
      });
      const out = lineWatcher(run.stdout);
      await waitUntil(() => a.processes().some((p) => isSleeping(p)), 30_000, "the stage running");
      cluster.stopServer();
      await a.log.waitFor(/kept in the outbox/, 30_000);
      cluster.startServer();
      await a.log.waitFor(/\[fault\]/, 30_000);
      a.kill();
      await a.exited;
      // The same host (home and id) comes back and drains what its outbox kept.
      const again = await startHost({ url, id: "box", slots: 1, home: a.home });
      expect(await run.exited).toBe(0);
      const result = out.lines.map((l) => JSON.parse(l)).find((e) => e.type === "result");
      expect(result.outputs.map((x: string) => x.split(" ")[0])).toEqual(["out-s0"]);
      expect(marks(file)).toEqual(["s0 box"]);
      // The host logs the commit after it: the root may have seen it and ended first.
      if (fault.startsWith("outbox-before")) await again.log.waitFor(/committed the result of work/, 30_000);
    }, 120_000);
  }
});

describe("Postgres restarted under busy hosts", () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster();
  });
  afterAll(() => cluster.stop());

  test("a crash and restart of the database while three hosts are busy: the run completes, every stage recorded once", async () => {
    const dir = makeTempDir("atomic-pgrestart-");
    const file = join(dir, "marks");
    const url = await createDatabase(cluster, `r_${Math.random().toString(36).slice(2, 8)}`);
    const hosts = await Promise.all(["r1", "r2", "r3"].map((id) => startHost({ url, id, slots: 2 })));
    const home = join(dir, "root");
    const run = spawnAtomic(["run", WF, "--workers", "0", "--json", "--input", "shells=60", "--input", "sleep=0.3", "--input", `marks=${file}`], {
      home,
      env: { ATOMIC_JOURNAL: url },
    });
    const out = lineWatcher(run.stdout);
    await waitUntil(() => marks(file).length >= 10, 60_000, "the hosts busy");
    cluster.restart();
    expect(await run.exited).toBe(0);
    await waitUntil(() => out.ended, 5_000, "the run's output to end");
    const result = out.lines.map((l) => JSON.parse(l)).find((e) => e.type === "result");
    expect(result.outputs.map((x: string) => x.split(" ")[0])).toEqual(Array.from({ length: 60 }, (_, i) => `out-s${i}`));
    expect(counts(marks(file).map((l) => l.split(" ")[0]!)).size).toBe(60);
    const show = JSON.parse((await runAtomic(["show", result.runId, "--json"], { home, env: { ATOMIC_JOURNAL: url } })).stdout);
    expect(show.steps.filter((s: Record<string, any>) => s.kind === "stage").length).toBe(60);
    for (const h of hosts) expect(h.processes().length).toBeGreaterThan(0); // the hosts rode it out
  }, 120_000);
});

function isSleeping(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith("sleep");
  } catch {
    return false;
  }
}
