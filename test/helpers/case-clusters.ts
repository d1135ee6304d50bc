/**
 * A Postgres cluster for each of a file's concurrent cases (bun's
 * `test.concurrent`, helpers/concurrent.ts): tests that stop their server
 * for an outage cannot share one, since an outage would stop it under every
 * other case too. With a cluster each, the cases run at once and their
 * outages overlap in wall time, where one after the other they added up,
 * while each case's outage, length and assertions stay what they were
 * (test/fleet/outage-cases.ts, test/recovery/postgres-outage.test.ts).
 * The clusters start before the file's first test and stop after its last.
 */

import { afterAll, beforeAll } from "bun:test";
import { startCluster, type Cluster } from "./postgres.ts";

const HOOK_LIMIT_MS = 120_000;

/** A cluster for each of `cases` concurrent cases: `cluster(i)` is case i's. */
export function clusterPerCase(cases: number): (i: number) => Cluster {
  const clusters: Cluster[] = [];
  // Starting and stopping clusters on a loaded machine can take longer than bun's default 5 s for a hook.
  beforeAll(async () => {
    for (let i = 0; i < cases; i++) clusters.push(await startCluster());
  }, HOOK_LIMIT_MS);
  afterAll(() => {
    for (const c of clusters) c.stop();
  }, HOOK_LIMIT_MS);
  return (i) => clusters[i]!;
}
