/**
 * Postgres going away under a running workflow (pooled stages, then a
 * sequence of tool steps, each appending its idempotency key to a file):
 * - `pg_ctl restart -m immediate` in the middle: the run goes on and
 *   completes, every tool step ran exactly once;
 * - every backend of the run terminated (`pg_terminate_backend`) again and
 *   again: the same;
 * - the server down for longer than the journal's retry time
 *   (ATOMIC_JOURNAL_RETRY_MS, short here): the run stops with
 *   storage_unavailable, resumable; once the server is back, `atomic
 *   resume` completes it without re-running a recorded step.
 * A cluster of this file's own (it is restarted and stopped), removed at the
 * end whatever happened. Durations are never asserted.
 */

import { afterAll, afterEach, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { killSpawned, lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { postgresInstalled, startCluster, type Cluster } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const STEPS = join(import.meta.dir, "..", "e2e", "fixtures", "pg-steps.ts");
let cluster: Cluster | undefined;
const pools: pg.Pool[] = [];

afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});
afterAll(async () => {
  for (const p of pools.splice(0)) await p.end().catch(() => {});
  cluster?.stop();
});

/** The test's own superuser connection (an idle one the server dropped is replaced, not an error). */
function adminPool(): pg.Pool {
  if (!pools[0]) {
    const pool = new pg.Pool({ connectionString: cluster!.adminUrl, max: 1 });
    pool.on("error", () => {});
    pools.push(pool);
  }
  return pools[0]!;
}

async function database(): Promise<string> {
  cluster ??= await startCluster();
  const name = `faults_${Math.random().toString(36).slice(2, 10)}`;
  await adminPool().query(`create database ${name}`);
  const u = new URL(cluster.adminUrl);
  u.pathname = `/${name}`;
  return u.toString();
}

function setup(url: string, steps: number, extra: Record<string, string> = {}) {
  const root = makeTempDir("atomic-pg-faults-");
  const home = join(root, "home");
  const out = join(root, "out");
  mkdirSync(out);
  const env = { ATOMIC_JOURNAL: url, OUT_DIR: out, STEPS: String(steps), DELAY_MS: "50", ...extra };
  const effects = () => (existsSync(join(out, "effects.txt")) ? readFileSync(join(out, "effects.txt"), "utf8").split("\n").filter(Boolean) : []);
  return { home, env, effects };
}

function counts(lines: string[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const l of lines) m.set(l, (m.get(l) ?? 0) + 1);
  return m;
}

const total = (n: number) => (n * (n + 1)) / 2;

test.skipIf(!postgresInstalled())("postgres restarted (-m immediate) mid-run: the run goes on and completes, each step ran once", async () => {
  const s = setup(await database(), 30);
  const proc = spawnAtomic(["run", STEPS], { home: s.home, env: s.env });
  const out = lineWatcher(proc.stdout);
  await out.waitFor(/^started run /);
  await waitUntil(() => s.effects().length >= 8, 60_000, "eight tool steps");
  cluster!.restart();
  expect(await proc.exited).toBe(0);
  await out.waitFor(new RegExp(`"total": ${total(30)}`));
  const c = counts(s.effects());
  expect(c.size).toBe(30);
  expect([...c.values()].every((n) => n === 1)).toBe(true);
}, 120_000);

test.skipIf(!postgresInstalled())("postgres backends terminated again and again mid-run: the run completes, each step ran once", async () => {
  const url = await database();
  const s = setup(url, 30);
  const proc = spawnAtomic(["run", STEPS], { home: s.home, env: s.env });
  const out = lineWatcher(proc.stdout);
  await out.waitFor(/^started run /);
  const admin = adminPool();
  const db = new URL(url).pathname.slice(1);
  let killed = 0;
  for (let round = 0; round < 6 && proc.exitCode === null; round++) {
    await waitUntil(() => s.effects().length >= 3 + round * 4 || proc.exitCode !== null, 60_000, "more tool steps");
    const r = await admin.query<{ n: number }>("select count(*)::int as n from (select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()) t", [db]);
    killed += r.rows[0]!.n;
  }
  expect(killed).toBeGreaterThan(0);
  expect(await proc.exited).toBe(0);
  await out.waitFor(new RegExp(`"total": ${total(30)}`));
  const c = counts(s.effects());
  expect(c.size).toBe(30);
  expect([...c.values()].every((n) => n === 1)).toBe(true);
}, 120_000);

test.skipIf(!postgresInstalled())("postgres down for longer than the retry time: the run stops with storage_unavailable, resumable; resume completes it once the server is back", async () => {
  const s = setup(await database(), 30, { ATOMIC_JOURNAL_RETRY_MS: "2000" });
  const proc = spawnAtomic(["run", STEPS], { home: s.home, env: s.env });
  const out = lineWatcher(proc.stdout);
  const id = /started run (\S+)/.exec(await out.waitFor(/^started run /))![1]!;
  await waitUntil(() => s.effects().length >= 8, 60_000, "eight tool steps");
  cluster!.stopServer();
  let stderr = "";
  try {
    const [err, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited]);
    stderr = err;
    expect(code).not.toBe(0);
  } finally {
    cluster!.startServer();
  }
  expect(`${out.text()}\n${stderr}`).toMatch(/lost the connection to the journal's Postgres/);
  expect(`${out.text()}\n${stderr}`).toContain(`atomic resume ${id}`);
  const before = counts(s.effects());

  const resumed = await runAtomic(["resume", id], { home: s.home, env: s.env, timeoutMs: 90_000 });
  expect(resumed.stderr).toBe("");
  expect(resumed.code).toBe(0);
  expect(resumed.stdout).toContain(`"total": ${total(30)}`);
  const after = counts(s.effects());
  expect(after.size).toBe(30);
  // Only a step in flight when the server went away may have run twice.
  expect([...after.values()].filter((n) => n > 1).length).toBeLessThanOrEqual(1);
  for (const [key, n] of before) expect(after.get(key)).toBeLessThanOrEqual(n + 1);
}, 150_000);
