/**
 * The Postgres journal's durable steps, on a throw-away cluster
 * (test/helpers/postgres.ts) with fsync on, in process through the engine:
 *
 * - sequential: 2,000 no-op `ctx.tool` steps in one workflow against raw
 *   single-row autocommit INSERTs into an events-shaped table of the same
 *   database, through the same driver (pg, one connection, prepared), with
 *   the same synchronous_commit (on), alternating. Target: at least 0.6 of
 *   raw (the append is one round trip and one commit, append-sql.ts).
 * - fan-out: 200 no-op steps under one `ctx.parallel` against the same 200
 *   in sequence, makespan inside the workflow. Target: at most 0.3 (group
 *   commit: the journal's append calls per run are shown).
 * - children: 300 child workflows of 3 no-op steps under one ctx.parallel,
 *   child runs/s over the fan-out's makespan, next to the same on the
 *   embedded SQLite journal (synchronous=FULL) in the same run; reported,
 *   no target.
 *
 * The machine is shared and loaded: figures vary between runs; the ratios
 * are what to read.
 */

import pg from "pg";
import { PostgresJournal } from "../src/journal/postgres/postgres-journal.ts";
import { createDatabase, startCluster } from "../test/helpers/postgres.ts";
import type { Journal } from "../src/journal/journal.ts";
import { alternate, expectStatus, fmt, loadBenchWorkflow, median, meterJournal, openCountedJournal, runInProcess, spread, tempDir, removeTempDir, type Bench, type Result } from "./lib.ts";

const STEPS = 2_000;
const FAN = 200;
const REPS = 3;
/** Pairs for the sequential figure: its ratio sits near the target, and one run of either side varies by ±10 % on these VMs. */
const SEQ_REPS = 7;
const CHILDREN = 300;

const RAW_PAYLOAD = JSON.stringify({ kind: "tool", name: "noop", args: "1b3k9x2m4q7zp", result: {}, startedAt: Date.now() });

async function rawCommits(client: pg.PoolClient, n: number, offset: number): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await client.query({
      name: "raw-insert",
      text: "insert into raw_events (run_id, seq, type, key, payload, at) values ($1, $2, $3, $4, $5, $6)",
      values: ["raw-run", offset + i, "checkpoint", String(i), RAW_PAYLOAD, Date.now()],
    });
  }
  return performance.now() - t0;
}

const bench: Bench = {
  name: "postgres",
  title: "durable steps on the Postgres journal vs raw single-row commits; fan-out vs sequence",
  async run(): Promise<Result[]> {
    const cluster = await startCluster({ durable: true });
    const home = tempDir();
    try {
      const url = await createDatabase(cluster, "bench");
      const journal = await PostgresJournal.open(url, { durability: "full" });
      const tx = meterJournal(journal);
      const raw = new pg.Pool({ connectionString: url, max: 1 });
      const client = await raw.connect();
      try {
        await client.query("create table raw_events (run_id text not null, seq bigint not null, type text not null, key text, idempotency_key text, payload text, at bigint not null, primary key (run_id, seq))");
        const steps = await loadBenchWorkflow("steps.ts");
        const fan = await loadBenchWorkflow("fanout.ts");
        let offset = 0;
        // Warm-up: JIT, prepared statements, the first pages.
        offset += 200;
        await rawCommits(client, 200, 0);
        expectStatus(await runInProcess(journal, home, steps, { steps: 200 }), "completed");

        let appendsPerRun = 0;
        const seq = await alternate(SEQ_REPS, {
          raw: async () => {
            const ms = await rawCommits(client, STEPS, offset);
            offset += STEPS;
            return ms;
          },
          engine: async () => {
            tx.reset();
            const run = await runInProcess(journal, home, steps, { steps: STEPS });
            expectStatus(run, "completed");
            appendsPerRun = tx.append;
            return run.ms;
          },
        });
        const rawRate = STEPS / (median(seq.raw) / 1000);
        const engineRate = STEPS / (median(seq.engine) / 1000);
        const ratio = engineRate / rawRate;

        let fanAppends = 0;
        const makespan = async (mode: "parallel" | "sequential") => {
          tx.reset();
          const run = await runInProcess(journal, home, fan, { steps: FAN, mode });
          expectStatus(run, "completed");
          if (mode === "parallel") fanAppends = tx.append;
          return (run.outcome as { outputs?: { makespanMs: number } }).outputs?.makespanMs ?? run.ms;
        };
        const fanSamples = await alternate(REPS, { parallel: () => makespan("parallel"), sequential: () => makespan("sequential") });
        const fanRatio = median(fanSamples.parallel) / median(fanSamples.sequential);

        const parent = await loadBenchWorkflow("children.ts");
        const sqliteHome = tempDir();
        const { journal: sqlite } = await openCountedJournal(sqliteHome, "full");
        const children = async (j: Journal) => {
          const run = await runInProcess(j, home, parent, { children: CHILDREN, steps: 3 });
          expectStatus(run, "completed");
          return (run.outcome.outputs as { makespanMs: number }).makespanMs;
        };
        let kids: Record<"postgres" | "sqlite", number[]>;
        try {
          await runInProcess(journal, home, parent, { children: 20, steps: 3 });
          await runInProcess(sqlite, sqliteHome, parent, { children: 20, steps: 3 });
          kids = await alternate(REPS, { postgres: () => children(journal), sqlite: () => children(sqlite) });
        } finally {
          await sqlite.close();
          removeTempDir(sqliteHome);
        }
        const pgRate = CHILDREN / (median(kids.postgres) / 1000);
        const sqliteRate = CHILDREN / (median(kids.sqlite) / 1000);
        return [
          {
            bench: "postgres",
            label: `Postgres: sequential durable steps/s (${fmt(STEPS, 0)} no-op ctx.tool steps, synchronous_commit on)`,
            value: engineRate,
            unit: "steps/s",
            baseline: { label: "raw single-row autocommit INSERTs through pg, same database", value: rawRate, unit: "commits/s" },
            ratio: { value: ratio, meaning: "engine steps/s ÷ raw commits/s" },
            target: { text: "ratio >= 0.6", ok: ratio >= 0.6 },
            notes: [`engine ${spread(seq.engine)}, raw ${spread(seq.raw)}`, `append calls per run: ${appendsPerRun} (${fmt(appendsPerRun / STEPS, 3)} per step)`],
          },
          {
            bench: "postgres",
            label: `Postgres: fan-out makespan of ${FAN} no-op steps under one ctx.parallel`,
            value: median(fanSamples.parallel),
            unit: "ms",
            baseline: { label: `the same ${FAN} steps in sequence`, value: median(fanSamples.sequential), unit: "ms" },
            ratio: { value: fanRatio, meaning: "parallel ÷ sequential makespan" },
            target: { text: "ratio <= 0.3", ok: fanRatio <= 0.3 },
            notes: [`parallel ${spread(fanSamples.parallel)}, sequential ${spread(fanSamples.sequential)}`, `append calls for the parallel run: ${fanAppends}`],
          },
          {
            bench: "postgres",
            label: `Postgres: child runs/s, ${CHILDREN} children x 3 no-op steps under one ctx.parallel`,
            value: pgRate,
            unit: "child runs/s",
            baseline: { label: "the same on the embedded SQLite journal (synchronous=FULL)", value: sqliteRate, unit: "child runs/s" },
            ratio: { value: pgRate / sqliteRate, meaning: "Postgres ÷ SQLite child runs/s" },
            notes: [`Postgres makespan ${spread(kids.postgres)}, SQLite ${spread(kids.sqlite)}`],
          },
        ];
      } finally {
        client.release();
        await raw.end();
        await journal.close();
      }
    } finally {
      removeTempDir(home);
      cluster.stop();
    }
  },
};

export default bench;
