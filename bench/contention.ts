/**
 * A busy host (issue 25, benchmark d): the sequential workload, 1,000
 * no-op `ctx.tool` steps (bench/workflows/steps.ts) through
 * `dist/atomic run`, on the SQLite journal and on a Postgres journal (a
 * throw-away cluster on this machine, test/helpers/postgres.ts), each with
 * two CPU-bound processes (`sh` busy loops, the same priority as ours)
 * running beside it, against the same run on the quiet machine,
 * alternating (quiet, busy, quiet, busy, ...). Target: the busy run at
 * most 2x the quiet one (medians).
 *
 * What it guards: no process of ours may busy-wait (spin, Atomics.wait
 * loops, short polls in place of a blocking wait) for a database, a socket
 * or a child, because on a busy host it takes the CPU from the very
 * process it waits for (test/conformance/busy-wait.test.ts checks the
 * waits themselves). A sequential run is a chain of round trips (a step,
 * its commit, the next step): every wait in it is on the critical path.
 *
 * "Quiet" means without our two hogs: the machine is shared, and what else
 * runs is shown by the load averages in the notes.
 *
 * On Postgres a step is one round trip (one statement, its own commit:
 * journal/postgres/append-sql-v8.ts), so each step wakes two processes, the
 * server's backend and ours, and on a busy host each wake-up waits for a
 * CPU. For information, the floor under that, quiet vs busy the same way
 * (no engine, no process start): the same count of raw single-row commits
 * through pg from this process, one connection; and the same from pgbench
 * (libpq, C, prepared), the least any client can do per step.
 */

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { binDir, createDatabase, startCluster } from "../test/helpers/postgres.ts";
import {
  WORKFLOWS,
  atomicBin,
  binaryEnv,
  fmt,
  loadAverage,
  median,
  removeTempDir,
  runTimed,
  spawnTracked,
  spread,
  tempDir,
  type Bench,
  type Result,
} from "./lib.ts";

const STEPS = 1_000;
const REPS = 5;
const HOGS = 2;
const TARGET = 2;

/** Two CPU-bound processes until stop(). */
function hogs(): { stop(): Promise<void> } {
  const procs = Array.from({ length: HOGS }, () => spawnTracked(["/bin/sh", "-c", "while :; do :; done"], {}));
  return {
    async stop() {
      for (const p of procs) p.kill("SIGKILL");
      await Promise.all(procs.map((p) => p.exited));
    },
  };
}

async function sequential(bin: string, journal: string | undefined): Promise<number> {
  const home = tempDir("atomic-bench-contention-");
  try {
    const r = await runTimed([bin, "run", join(WORKFLOWS, "steps.ts"), "--input", `steps=${STEPS}`, "--quiet", ...(journal ? ["--journal", journal] : [])], {
      env: binaryEnv(home),
      capture: true,
    });
    if (r.code !== 0) throw new Error(`atomic run exited ${r.code}: ${r.stderr.slice(-500)}`);
    return r.ms;
  } finally {
    removeTempDir(home);
  }
}

/** Runs `once` alternately without and with the hogs (after one warm-up), REPS times each: the figures and the load averages. */
async function alternate(once: () => Promise<number>): Promise<{ quiet: number[]; busy: number[]; loads: string[] }> {
  const loads: string[] = [loadAverage()];
  const quiet: number[] = [];
  const busy: number[] = [];
  await once(); // warm-up
  for (let i = 0; i < REPS; i++) {
    quiet.push(await once());
    const h = hogs();
    try {
      busy.push(await once());
    } finally {
      await h.stop();
    }
  }
  loads.push(loadAverage());
  return { quiet, busy, loads };
}

/** A result of `alternate`: the busy median against the quiet one; `target` only for the engine's own figures. */
function busyVsQuiet(label: string, baseline: string, m: Awaited<ReturnType<typeof alternate>>, target: boolean): Result {
  const ratio = median(m.busy) / median(m.quiet);
  return {
    bench: "contention",
    label,
    value: median(m.busy),
    unit: "ms",
    baseline: { label: baseline, value: median(m.quiet), unit: "ms" },
    ratio: { value: ratio, meaning: "busy ÷ quiet" },
    ...(target ? { target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET } } : {}),
    notes: [`busy: ${spread(m.busy)}`, `quiet: ${spread(m.quiet)}`, `load average before ${m.loads[0]}, after ${m.loads[1]} (2 CPUs, shared)`],
  };
}

async function measure(bin: string, name: string, journal: () => Promise<string | undefined>): Promise<Result> {
  const m = await alternate(async () => sequential(bin, await journal()));
  return busyVsQuiet(`${fmt(STEPS, 0)} sequential steps on ${name} with ${HOGS} CPU-bound processes beside it, whole \`atomic run\``, "the same run without them", m, true);
}

/** `STEPS` single-row commits in sequence through one pg connection, ms. */
async function rawCommits(client: pg.Client): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < STEPS; i++) await client.query({ name: "insert", text: "insert into steps (n) values ($1)", values: [i] });
  return performance.now() - t0;
}

async function rawFloor(url: string): Promise<Result> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query("create table steps (id bigserial primary key, n integer not null)");
    const m = await alternate(() => rawCommits(client));
    return busyVsQuiet(`floor: ${fmt(STEPS, 0)} raw single-row commits through pg on the same Postgres with ${HOGS} CPU-bound processes beside it`, "the same commits without them", m, false);
  } finally {
    await client.end();
  }
}

/**
 * The floor of any client: the same `STEPS` single-row commits from
 * pgbench (C, libpq, one connection, prepared), its own latency average
 * times `STEPS` (its start and connection left out).
 */
async function pgbenchFloor(url: string, home: string): Promise<Result | undefined> {
  const dir = binDir();
  if (!dir) return undefined;
  const script = join(home, "insert.sql");
  writeFileSync(script, "insert into steps (n) values (1);\n");
  const once = async () => {
    const r = await runTimed([join(dir, "pgbench"), "-n", "-c", "1", "-t", String(STEPS), "-M", "prepared", "-f", script, url], { capture: true });
    const latency = /latency average = ([\d.]+) ms/.exec(r.stdout);
    if (r.code !== 0 || !latency) throw new Error(`pgbench exited ${r.code}: ${(r.stderr || r.stdout).slice(-500)}`);
    return Number(latency[1]) * STEPS;
  };
  const m = await alternate(once);
  return busyVsQuiet(`floor: ${fmt(STEPS, 0)} single-row commits from pgbench (libpq, prepared) on the same Postgres with ${HOGS} CPU-bound processes beside it`, "the same commits without them", m, false);
}

const bench: Bench = {
  name: "contention",
  title: `${fmt(STEPS, 0)} sequential steps beside ${HOGS} CPU hogs vs quiet, on SQLite and on Postgres`,
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    const results = [await measure(bin, "SQLite", async () => undefined)];
    const cluster = await startCluster({ durable: true });
    try {
      let n = 0;
      // A database of its own for every run, as a fresh home is for SQLite.
      results.push(await measure(bin, "Postgres", () => createDatabase(cluster, `contention${n++}`)));
      const raw = await createDatabase(cluster, "contention_raw");
      results.push(await rawFloor(raw));
      const home = tempDir("atomic-bench-contention-pgbench-");
      try {
        const floor = await pgbenchFloor(raw, home);
        if (floor) results.push(floor);
      } finally {
        removeTempDir(home);
      }
    } finally {
      cluster.stop();
    }
    return results;
  },
};

export default bench;
