/**
 * Run by test/fleet/harness.test.ts where namespaces are refused (inside an
 * unprivileged user namespace, as in a container): makes two fleets without
 * Postgres, prints each one's mode and what a host's command sees, and
 * destroys them. The notice that namespaces are not available goes to
 * stderr, once.
 */

import { makeFleet } from "../helpers/fleet.ts";

for (let i = 0; i < 2; i++) {
  const fleet = await makeFleet({ hosts: 2, postgres: false });
  const seen = await fleet.hosts[1]!.exec(["sh", "-c", 'echo "$ATOMIC_HOST_ID"']);
  console.log(`${fleet.mode} ${seen.stdout.trim()} ${fleet.hosts[1]!.address}`);
  await fleet.destroy();
}
