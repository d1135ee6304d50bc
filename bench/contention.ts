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
 * CPU. For information, the floor under that: the same count of raw
 * single-row commits through pg from this process, one connection, quiet
 * vs busy the same way (no engine, no process start).
 */

import { join } from "node:path";
import pg from "pg";
import { createDatabase, startCluster } from "../test/helpers/postgres.ts";
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

async function measure(bin: string, name: string, journal: () => Promise<string | undefined>): Promise<Result> {
  const loads: string[] = [loadAverage()];
  const quiet: number[] = [];
  const busy: number[] = [];
  await sequential(bin, await journal()); // warm-up
  for (let i = 0; i < REPS; i++) {
    quiet.push(await sequential(bin, await journal()));
    const h = hogs();
    try {
      busy.push(await sequential(bin, await journal()));
    } finally {
      await h.stop();
    }
  }
  loads.push(loadAverage());
  const ratio = median(busy) / median(quiet);
  return {
    bench: "contention",
    label: `${fmt(STEPS, 0)} sequential steps on ${name} with ${HOGS} CPU-bound processes beside it, whole \`atomic run\``,
    value: median(busy),
    unit: "ms",
    baseline: { label: "the same run without them", value: median(quiet), unit: "ms" },
    ratio: { value: ratio, meaning: "busy ÷ quiet" },
    target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET },
    notes: [`busy: ${spread(busy)}`, `quiet: ${spread(quiet)}`, `load average before ${loads[0]}, after ${loads[1]} (2 CPUs, shared)`],
  };
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
    const loads: string[] = [loadAverage()];
    const quiet: number[] = [];
    const busy: number[] = [];
    await rawCommits(client); // warm-up
    for (let i = 0; i < REPS; i++) {
      quiet.push(await rawCommits(client));
      const h = hogs();
      try {
        busy.push(await rawCommits(client));
      } finally {
        await h.stop();
      }
    }
    loads.push(loadAverage());
    return {
      bench: "contention",
      label: `floor: ${fmt(STEPS, 0)} raw single-row commits through pg on the same Postgres with ${HOGS} CPU-bound processes beside it`,
      value: median(busy),
      unit: "ms",
      baseline: { label: "the same commits without them", value: median(quiet), unit: "ms" },
      ratio: { value: median(busy) / median(quiet), meaning: "busy ÷ quiet" },
      notes: [`busy: ${spread(busy)}`, `quiet: ${spread(quiet)}`, `load average before ${loads[0]}, after ${loads[1]} (2 CPUs, shared)`],
    };
  } finally {
    await client.end();
  }
}

const bench: Bench = {
  name: "contention",
  title: `${fmt(STEPS, 0)} sequential steps beside ${HOGS} CPU hogs vs quiet, on SQLite and on Postgres`,
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    const results = [await measure(bin, "SQLite", async () => undefined)];
    const cluster = await startCluster();
    try {
      let n = 0;
      // A database of its own for every run, as a fresh home is for SQLite.
      results.push(await measure(bin, "Postgres", () => createDatabase(cluster, `contention${n++}`)));
      results.push(await rawFloor(await createDatabase(cluster, "contention_raw")));
    } finally {
      cluster.stop();
    }
    return results;
  },
};

export default bench;
