/**
 * Recovery on the Postgres journal: bench/recovery.ts as it is (2,000
 * no-op steps killed right after the 1,000th checkpoint, then resumed with
 * the real binary; target: time to the first new step at most 5x the
 * startup of `dist/atomic --help`), with every binary pointed at a
 * database of a throw-away cluster (test/helpers/postgres.ts) through
 * ATOMIC_JOURNAL, as a user would.
 */

import { createDatabase, startCluster } from "../test/helpers/postgres.ts";
import recovery from "./recovery.ts";
import type { Bench, Result } from "./lib.ts";

const bench: Bench = {
  name: "postgres-recovery",
  title: "resume after SIGKILL at step 1,000 of 2,000, on the Postgres journal, vs dist/atomic --help",
  async run(): Promise<Result[]> {
    const cluster = await startCluster({ durable: true });
    try {
      // binaryEnv (lib.ts) passes this process's environment to every binary the recovery bench starts.
      process.env.ATOMIC_JOURNAL = await createDatabase(cluster, "bench");
      const results = await recovery.run();
      return results.map((r) => ({ ...r, bench: "postgres-recovery", label: `Postgres: ${r.label}` }));
    } finally {
      delete process.env.ATOMIC_JOURNAL;
      cluster.stop();
    }
  },
};

export default bench;
