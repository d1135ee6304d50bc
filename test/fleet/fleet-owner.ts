/**
 * A process that owns a fleet and is SIGKILLed by test/fleet/harness.test.ts
 * (the stale sweep's test): makes a fleet of two hosts (argv[2]: the mode;
 * argv[3] "postgres" to start its cluster too), starts a sleeping process
 * tree in each host, prints one JSON line naming everything it made, and
 * waits to be killed.
 */

import { type FleetMode, makeFleet } from "../helpers/fleet.ts";

const fleet = await makeFleet({ hosts: 2, mode: process.argv[2] as FleetMode, postgres: process.argv[3] === "postgres" });
for (const host of fleet.hosts) host.spawn(["sh", "-c", "sleep 1000 & sleep 1000 & wait"]);
for (;;) {
  const pids = fleet.hosts.flatMap((h) => h.processes());
  if (pids.length >= 3 * fleet.hosts.length) {
    console.log(JSON.stringify({ tag: fleet.tag, dir: fleet.dir, clusterDir: fleet.cluster?.dir, namespaces: fleet.hosts.map((h) => h.namespace).filter(Boolean), bridge: fleet.bridge, pids }));
    break;
  }
  await Bun.sleep(20);
}
setInterval(() => {}, 1 << 30);
