/**
 * A Postgres outage under a workflow of tool steps and parallel shell
 * stages (fixtures/pg-outage.ts), the server stopped (`pg_ctl stop -m
 * immediate`) in the middle and kept down until atomic has exited:
 * - left alone, the run stops with storage_unavailable and the Postgres
 *   hint (the server's address, the journal URL shown the same way in
 *   every mention, the resume command), after the retry window of the whole
 *   outage (ATOMIC_JOURNAL_RETRY_MS, short here), not one per write;
 *   the journal URL carries a password (of a role of the test's own, with
 *   characters a URL must encode): every mention shows the URL without it,
 *   and it is nowhere in what atomic printed, stored in the journal or wrote
 *   in its home (logs included), raw or encoded;
 * - at random points (seeded) with outages of 25-80 s and the default
 *   15 s window: the run stops with storage_unavailable before the outage
 *   ends; SIGTERM during the outage ends the process without waiting the
 *   window out: the error says it stopped while stopping;
 * and in both cases, once the server is back, `atomic resume` completes the
 * run with only the steps that were in flight run again;
 * - `atomic serve` says the server is unreachable, reports its failed scans
 *   (each at its own interval), goes on standby, and is active again once
 *   the server is back.
 * "Stopped before the outage ended" holds by construction in the fixed
 * case (the server is started again only after the process exited) and by
 * the outcome in the random ones (a run that outlasted its outage would
 * have found the server back and completed). Durations are never
 * asserted; bench/postgres-outage.ts measures them.
 */

import { afterAll, afterEach, expect, test } from "bun:test";
import fc from "fast-check";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { killSpawned, lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { postgresInstalled, startCluster, withDatabase, type Cluster } from "../helpers/postgres.ts";
import { filesUnder, makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const WORKFLOW = join(import.meta.dir, "fixtures", "pg-outage.ts");
const ROUNDS = 12;
let cluster: Cluster | undefined;

afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});
// Stopping a cluster on a loaded machine can take longer than bun's default 5 s for a hook (a plain `bun test`).
afterAll(() => cluster?.stop(), 60_000);

/**
 * A database of its own, owned by a role of its own whose password is in the journal URL: it has characters a URL
 * must percent-encode (`/`, `@`, `:`), so a leak would show raw or encoded.
 */
async function setup(extra: Record<string, string> = {}) {
  cluster ??= await startCluster();
  const name = `outage_${Math.random().toString(36).slice(2, 10)}`;
  const password = `pw/${name}@secret:${crypto.randomUUID()}`;
  await asAdmin(async (c) => {
    await c.query(`create role ${name} login password '${password}'`);
    await c.query(`create database ${name} owner ${name}`);
  });
  const u = new URL(withDatabase(cluster.adminUrl, name));
  u.username = name;
  u.password = encodeURIComponent(password);
  const url = u.toString();
  const root = makeTempDir("atomic-pg-outage-");
  const home = join(root, "home");
  const out = join(root, "out");
  mkdirSync(out);
  // The workflow's last round waits for this gate (fixtures/pg-outage.ts), opened once the server is stopped: however
  // late the drawn point and however slow the machine, the outage begins while the run still has work to journal.
  const gate = join(out, "outage-begun");
  const env = { ATOMIC_JOURNAL: url, OUT_DIR: out, ROUNDS: String(ROUNDS), GATE: gate, ...extra };
  const effects = () => (existsSync(join(out, "effects.txt")) ? readFileSync(join(out, "effects.txt"), "utf8").split("\n").filter(Boolean) : []);
  const stopServer = () => {
    cluster!.stopServer();
    writeFileSync(gate, "");
  };
  return { url, password, home, env, effects, stopServer };
}

async function asAdmin<T>(fn: (c: pg.Client) => Promise<T>, database = "postgres"): Promise<T> {
  const c = new pg.Client({ connectionString: withDatabase(cluster!.adminUrl, database) });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** The password's forms a leak could take: as given, percent-encoded (as in the URL), and hex (a bytea column read as text). */
function passwordForms(password: string): string[] {
  return [password, encodeURIComponent(password), Buffer.from(password).toString("hex")];
}

/** The password in none of `texts` (what atomic printed), none of the journal's rows, none of the home's files (its logs included). */
async function expectPasswordNowhere(s: Awaited<ReturnType<typeof setup>>, ...texts: string[]) {
  const database = new URL(s.url).pathname.slice(1);
  const rows = await asAdmin(async (c) => {
    const tables = (await c.query<{ t: string }>("select format('%I.%I', table_schema, table_name) as t from information_schema.tables where table_schema = 'atomic'")).rows;
    expect(tables.length).toBeGreaterThan(0);
    const all: string[] = [];
    for (const { t } of tables) all.push(...(await c.query<{ row: string }>(`select r::text as row from ${t} r`)).rows.map((r) => r.row));
    return all.join("\n");
  }, database);
  const files = filesUnder(s.home);
  expect(files.length).toBeGreaterThan(0);
  const where: [string, string][] = [...texts.map((t, i) => [`output ${i + 1}`, t] as [string, string]), ["the journal", rows], ...files.map((f) => [f, readFileSync(f, "latin1")] as [string, string])];
  for (const form of passwordForms(s.password)) {
    expect(where.filter(([, text]) => text.includes(form)).map(([name]) => name)).toEqual([]);
  }
}

function counts(lines: string[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const l of lines) m.set(l, (m.get(l) ?? 0) + 1);
  return m;
}

type Watcher = ReturnType<typeof lineWatcher>;

/** Where an outage starts (after `after` side effects of the workflow) and how long it lasts at most. */
interface OutagePlan {
  after: number;
  /** The server comes back after this long, or as soon as atomic exited: unset, only the exit brings it back. */
  lastsMs?: number;
}

/**
 * Runs the workflow, stops the server once the workflow had `after` side effects, calls `during` (while the
 * server is down), and returns what the process said, with the server started again: when the process exited,
 * or when the outage's length is up if that comes first (the run then finds the server back and goes on).
 */
async function outage(s: Awaited<ReturnType<typeof setup>>, during: (proc: ReturnType<typeof spawnAtomic>, err: Watcher) => Promise<void> = async () => {}, plan: OutagePlan = { after: 9 }) {
  const proc = spawnAtomic(["run", WORKFLOW], { home: s.home, env: s.env });
  const out = lineWatcher(proc.stdout);
  const err = lineWatcher(proc.stderr);
  const id = /started run (\S+)/.exec(await out.waitFor(/^started run /))![1]!;
  await waitUntil(() => s.effects().length >= plan.after, 60_000, `${plan.after} side effects`);
  s.stopServer();
  let back = false;
  const end = plan.lastsMs === undefined ? undefined : setTimeout(() => {
    back = true;
    cluster!.startServer();
  }, plan.lastsMs);
  let code: number;
  try {
    await during(proc, err);
    code = await proc.exited;
  } finally {
    clearTimeout(end);
    if (!back) cluster!.startServer();
  }
  await waitUntil(() => out.ended && err.ended, 10_000, "the end of its output");
  return { id, code, said: `${out.text()}\n${err.text()}`, before: counts(s.effects()) };
}

/**
 * The Postgres hint: the server's address, the journal's URL without its password (every mention of it the same:
 * no `[redacted]`, which would hide the address too), the resume command; nothing of SQLite's.
 */
function expectPostgresHint(said: string, url: string, id: string) {
  const u = new URL(url);
  const shown = `postgres://${u.username}@${u.host}${u.pathname}`;
  expect(said).toContain(`lost the connection to the journal's Postgres at ${shown}`);
  expect(said).toContain(`hint: check that the Postgres server at ${u.host} is up and reachable from this machine, then resume the run: atomic resume ${id}`);
  for (const m of said.matchAll(/postgres:\/\/(\S*?)@/g)) expect(m[1]).toBe(u.username);
  expect(said).not.toContain("[redacted]");
  expect(said).not.toMatch(/free space|writable again/);
}

/**
 * Resume completes; only steps in flight when the server went away ran again (one round at most: two shell stages
 * and a tool step). The password is then nowhere: not in what the run or the resume said, the journal, the home.
 */
async function expectResumeCompletes(s: Awaited<ReturnType<typeof setup>>, r: { id: string; said: string; before: Map<string, number> }) {
  const { id, before } = r;
  const resumed = await runAtomic(["resume", id], { home: s.home, env: s.env, timeoutMs: 90_000 });
  expect(resumed.stderr).toBe("");
  expect(resumed.code).toBe(0);
  expect(resumed.stdout).toContain(`"total": ${(ROUNDS * (ROUNDS + 1)) / 2}`);
  const after = counts(s.effects());
  expect(after.size).toBe(ROUNDS * 3);
  expect([...after.values()].filter((n) => n > 1).length).toBeLessThanOrEqual(3);
  for (const [key, n] of before) expect(after.get(key)).toBeLessThanOrEqual(n + 1);
  await expectPasswordNowhere(s, r.said, resumed.stdout);
}

test.skipIf(!postgresInstalled())("postgres down mid-run: the run stops with storage_unavailable and the Postgres hint; resume completes it once the server is back", async () => {
  const s = await setup({ ATOMIC_JOURNAL_RETRY_MS: "5000" });
  const r = await outage(s);
  expect(r.code).not.toBe(0);
  expect(r.said).toMatch(/for more than 5 s/);
  expect(r.said).toMatch(/the journal's Postgres at \S+ is unreachable .*; retrying for up to \d s more/);
  expectPostgresHint(r.said, s.url, r.id);
  await expectResumeCompletes(s, r);
}, 150_000);

/**
 * Outages at random points (issue 27): each case draws, from one seed, after how many of the workflow's
 * side effects the server stops (from the first round to the second last) and how long it stays down
 * (25-80 s; it comes back earlier once atomic exited, as nothing is left to wait for). With the default
 * retry window (15 s, at most 20 s with a statement's timeout) the run stops with storage_unavailable
 * before any of those outages ends: had it outlasted one, it would have found the server back and gone on
 * (completed, exit 0), which the case would report. A SIGTERM 2 s into the outage (when atomic says it is
 * waiting for the server) ends it without the window. Once the server is back, resume completes the run with
 * only the steps in flight run again. `FC_SEED=<seed>` (in the test names) replays the same points.
 */
const SEED = Number(process.env.FC_SEED?.trim() || Date.now() % 2 ** 31);
const PLANS = fc.sample(fc.noBias(fc.record({ after: fc.integer({ min: 1, max: ROUNDS * 3 - 6 }), lastsMs: fc.integer({ min: 25_000, max: 80_000 }) })), { seed: SEED, numRuns: 3 });
for (const [i, plan] of PLANS.entries()) {
  const sigterm = i === PLANS.length - 1;
  const what = sigterm ? "SIGTERM 2 s into it ends the process without the retry window" : "left alone, the run stops within the default retry window";
  test.skipIf(!postgresInstalled())(`a postgres outage of ${plan.lastsMs / 1000} s after ${plan.after} side effects (FC_SEED=${SEED}, case ${i + 1}): ${what}; resume completes the run`, async () => {
    const s = await setup();
    const r = await outage(s, async (proc, err) => {
      if (!sigterm) return;
      await err.waitFor(/the journal's Postgres at \S+ is unreachable .*; retrying for up to \d+ s more/);
      proc.kill("SIGTERM");
    }, plan);
    expect(r.code).not.toBe(0);
    if (sigterm) {
      expect(r.said).toMatch(/SIGTERM: stopping run/);
      expect(r.said).toContain("while this process was stopping");
      expect(r.said).not.toMatch(/for more than \d+ s/);
    } else {
      expect(r.said).toMatch(/for more than 15 s/);
    }
    expectPostgresHint(r.said, s.url, r.id);
    await expectResumeCompletes(s, r);
  }, 150_000);
}

test.skipIf(!postgresInstalled())(`a postgres outage at a random point of a run the service drives (FC_SEED=${SEED}): the drive stops, the service waits, and once the server is back it drives the run to completion`, async () => {
  const s = await setup({ ATOMIC_JOURNAL_RETRY_MS: "3000" });
  const proc = spawnAtomic(["--json", "serve", "--port", "0"], { home: s.home, env: s.env });
  const out = lineWatcher(proc.stdout);
  const err = lineWatcher(proc.stderr);
  const events = (type: string) => out.lines.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, unknown>).filter((e) => e.type === type);
  let before: Map<string, number>;
  let id: string;
  try {
    await out.waitFor(/"type":"service_active"/);
    const detached = await runAtomic(["run", WORKFLOW, "--detach"], { home: s.home, env: s.env });
    expect(detached.code).toBe(0);
    id = detached.stdout.split("\n")[0]!.trim();
    await waitUntil(() => s.effects().length >= PLANS[0]!.after, 60_000, `${PLANS[0]!.after} side effects`);
    s.stopServer();
    try {
      // The drive stops with the journal away; the service keeps the run for later (it cannot even record otherwise).
      await out.waitFor(/"type":"drive_(crashed|stopped|refused|ended)"/, 60_000).catch((e: Error) => {
        const log = join(s.home, "service", "logs", `${id}.log`);
        throw new Error(`${e.message}\nthe drive's log:\n${existsSync(log) ? readFileSync(log, "utf8") : "(none)"}`);
      });
      before = counts(s.effects());
    } finally {
      cluster!.startServer();
    }
    await waitUntil(async () => (await runAtomic(["runs", "--json"], { home: s.home, env: s.env })).stdout.includes('"status":"completed"'), 90_000, "the run completed by the service").catch(async (err: Error) => {
      const runs = await runAtomic(["runs", "--json"], { home: s.home, env: s.env });
      throw new Error(`${err.message}\nruns: ${runs.stdout}${runs.stderr}\nservice: ${out.lines.filter((l) => !l.includes("service_error")).join("\n")}`);
    });
  } finally {
    proc.kill("SIGTERM");
  }
  expect(await proc.exited).toBe(0);
  expect(events("run_left")).toEqual([]);
  expect(events("drive_started").filter((e) => e.runId === id).length).toBe(2);
  const after = counts(s.effects());
  expect(after.size).toBe(ROUNDS * 3);
  for (const [key, n] of before!) expect(after.get(key)).toBeLessThanOrEqual(n + 1);
  await waitUntil(() => out.ended && err.ended, 10_000, "the end of its output");
  await expectPasswordNowhere(s, out.text(), err.text());
}, 150_000);

test.skipIf(!postgresInstalled())("the service during a postgres outage: says the server is unreachable and waits on standby, then takes its duties again once it is back", async () => {
  const s = await setup({ ATOMIC_JOURNAL_RETRY_MS: "3000" });
  const proc = spawnAtomic(["serve", "--port", "0"], { home: s.home, env: s.env });
  const out = lineWatcher(proc.stdout);
  const err = lineWatcher(proc.stderr);
  try {
    await out.waitFor(/this service is active/);
    cluster!.stopServer();
    try {
      await err.waitFor(/the journal's Postgres at \S+ is unreachable .*; retrying for up to \d s more/);
      // Past the retry window: each duty says what failed and tries again later (its own interval: no spinning).
      await err.waitFor(/recovery scan failed: lost the connection to the journal's Postgres at postgres:\/\/\S+ for more than 3 s .*; retrying/);
      await out.waitFor(/this service lost its lease and waits on standby/);
    } finally {
      cluster!.startServer();
    }
    await err.waitFor(/the journal's Postgres at \S+ is reachable again/);
    await waitUntil(() => out.lines.filter((l) => /this service is active/.test(l)).length >= 2, 30_000, "the service active again");
  } finally {
    proc.kill("SIGTERM");
  }
  expect(await proc.exited).toBe(0);
  await waitUntil(() => out.ended && err.ended, 10_000, "the end of its output");
  expect(err.text()).not.toContain("[redacted]");
  for (const m of err.text().matchAll(/postgres:\/\/(\S*?)@/g)) expect(m[1]).toBe(new URL(s.url).username);
  await expectPasswordNowhere(s, out.text(), err.text());
}, 120_000);
