/**
 * The random Postgres outages' cases side by side (service-host-outage,
 * host-outage-random): each case on a cluster of its own, so its outage
 * stops only that server, and a file's cases run at once (bun's
 * `test.concurrent`, helpers/concurrent.ts). An outage is a wait (the
 * processes that ride it out back off, and the tests assert they do), so
 * two at once overlap in wall time where one after the other added up
 * (2 × 25-80 s a file), while each case's length, point and assertions stay
 * what they were. Each case names its host (`caseHostId`): a host's
 * processes are found by the worker id in their environment, which must
 * not match the other case's. Hosts, every other spawned process and the
 * temp directories are cleaned up once no case is still running.
 */

import { afterEach } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { clusterPerCase as clusters } from "../helpers/case-clusters.ts";
import { whenIdle } from "../helpers/concurrent.ts";
import type { Cluster } from "../helpers/postgres.ts";
import { cleanUpHosts } from "./support.ts";

/** A cluster for each of `cases` concurrent cases (helpers/case-clusters.ts), and the hosts cleaned up once none runs. */
export function clusterPerCase(cases: number): (i: number) => Cluster {
  afterEach(whenIdle(cleanUpHosts));
  return clusters(cases);
}

/** Case i's host id. */
export const caseHostId = (i: number): string => `h${i}`;

/** The server of `cluster` up again after its outage; if it does not start, the error carries the end of its log. */
export function endOutage(cluster: Cluster): void {
  try {
    cluster.startServer();
  } catch (err) {
    let log = "";
    try {
      log = readFileSync(join(cluster.dir, "log"), "utf8").slice(-3000);
    } catch {
      // no log written
    }
    throw new Error(`${(err as Error).message}\nthe server's log:\n${log}`);
  }
}
