/**
 * A Postgres outage under a running workflow (test/recovery/fixtures/
 * pg-outage.ts: tool steps beside parallel shell stages), on a throw-away
 * cluster (test/helpers/postgres.ts) stopped with `pg_ctl stop -m
 * immediate` after three rounds and kept down until atomic has exited:
 * - left alone, with the default retry window (ATOMIC_JOURNAL_RETRY_MS,
 *   15 s): from the server's stop to the process's exit, vs that window.
 *   Target: at most the window plus 5 s (one statement timeout's worth;
 *   20 s in all by default), docs/guides/durability.md.
 * - SIGTERM sent once atomic said the server is unreachable (2 s into the
 *   outage): from the signal to the process's exit. Target: at most 2 s.
 * The correctness of both (the hint, resume afterwards) is
 * test/recovery/postgres-outage.test.ts.
 */

import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createDatabase, startCluster, type Cluster } from "../test/helpers/postgres.ts";
import { JOURNAL_RETRY_MS } from "../src/shared/config/environment.ts";
import { ROOT, atomicBin, binaryEnv, removeTempDirs, tempDir, type Bench, type Result } from "./lib.ts";

const WORKFLOW = join(ROOT, "test", "recovery", "fixtures", "pg-outage.ts");
/** What the bound allows beyond the retry window: one statement under way when the window ends. */
const STATEMENT_ALLOWANCE_MS = 5_000;
const SIGTERM_BOUND_MS = 2_000;

/** Runs the workflow, stops the server after three rounds; `during` may act; returns ms from the stop (or the signal) to the exit. */
async function outage(cluster: Cluster, name: string, sigterm: boolean): Promise<number> {
  const root = tempDir("atomic-bench-pg-outage-");
  const out = join(root, "out");
  mkdirSync(out);
  const env = binaryEnv(join(root, "home"), { ATOMIC_JOURNAL: await createDatabase(cluster, name), OUT_DIR: out, ROUNDS: "100", ATOMIC_JOURNAL_RETRY_MS: undefined });
  const proc = Bun.spawn([atomicBin(), "run", WORKFLOW], { env, stdout: "ignore", stderr: "pipe" });
  const effects = () => (existsSync(join(out, "effects.txt")) ? readFileSync(join(out, "effects.txt"), "utf8").split("\n").length - 1 : 0);
  try {
    while (effects() < 9) await Bun.sleep(20);
    cluster.stopServer();
    let from = performance.now();
    if (sigterm) {
      // Atomic's own line 2 s into the outage (src/journal/postgres/connection.ts).
      const reader = proc.stderr.getReader();
      let said = "";
      while (!/is unreachable/.test(said)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`atomic exited before saying the journal is unreachable: ${said}`);
        said += new TextDecoder().decode(value);
      }
      reader.releaseLock();
      from = performance.now();
      proc.kill("SIGTERM");
    }
    await proc.exited;
    return performance.now() - from;
  } finally {
    proc.kill("SIGKILL");
    cluster.startServer();
  }
}

const bench: Bench = {
  name: "postgres-outage",
  title: "Postgres stopped under a run: stop time with the default retry window; exit time after SIGTERM during the outage",
  async run(): Promise<Result[]> {
    const cluster = await startCluster({ durable: true });
    try {
      const stopMs = await outage(cluster, "outage_left", false);
      const termMs = await outage(cluster, "outage_term", true);
      const bound = JOURNAL_RETRY_MS + STATEMENT_ALLOWANCE_MS;
      return [
        {
          bench: "postgres-outage",
          label: "server stopped to the run's stop (storage_unavailable)",
          value: stopMs / 1000,
          unit: "s",
          baseline: { label: "the retry window (ATOMIC_JOURNAL_RETRY_MS default)", value: JOURNAL_RETRY_MS / 1000, unit: "s" },
          ratio: { value: stopMs / JOURNAL_RETRY_MS, meaning: "stop time / retry window" },
          target: { text: `<= window + ${STATEMENT_ALLOWANCE_MS / 1000} s (${bound / 1000} s)`, ok: stopMs <= bound },
        },
        {
          bench: "postgres-outage",
          label: "SIGTERM 2 s into the outage to the process's exit",
          value: termMs / 1000,
          unit: "s",
          baseline: { label: "the bound", value: SIGTERM_BOUND_MS / 1000, unit: "s" },
          ratio: { value: termMs / SIGTERM_BOUND_MS, meaning: "exit time / bound" },
          target: { text: `<= ${SIGTERM_BOUND_MS / 1000} s`, ok: termMs <= SIGTERM_BOUND_MS },
        },
      ];
    } finally {
      cluster.stop();
      removeTempDirs();
    }
  },
};

export default bench;
