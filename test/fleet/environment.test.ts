/**
 * A worker host runs a stage with the environment the stage's run recorded
 * when it started (issue 26), as the run's own workers and a resume do: a
 * variable of the run's starting shell that the host lacks is set, one only
 * the host has is not, and a secret-named one (never recorded) is the
 * host's own. Through the real binary: `atomic worker` and a root with
 * `--workers 0` on one Postgres journal (test/fleet/support.ts).
 */

import { afterEach, beforeAll, expect } from "bun:test";
import { join } from "node:path";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { concurrentTest, whenIdle } from "../helpers/concurrent.ts";
import { FIXTURES, startHost, stopHosts } from "./support.ts";

beforeAll(async () => {
  await testPostgres();
});
afterEach(
  whenIdle(async () => {
    await stopHosts();
    await killSpawned();
    removeTempDirs();
  }),
);

concurrentTest("worker hosts > a stage gets its run's recorded environment over the host's; secret-named variables stay the host's", async () => {
  const url = await freshDatabase("fleet");
  const dir = makeTempDir("atomic-fleet-env-");
  await startHost({ url, id: "envhost", slots: 1, env: { FLEET_HOST_VAR: "host-only", FLEET_API_TOKEN: "host-secret" } });
  const r = await runAtomic(["--json", "run", join(FIXTURES, "env.ts"), "--journal", url, "--workers", "0"], {
    home: join(dir, "root"),
    env: { FLEET_RUN_VAR: "from-run", FLEET_API_TOKEN: "root-secret" },
  });
  expect(r.code).toBe(0);
  const result = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { outputs: string };
  expect(result.outputs).toBe("run=from-run host=unset secret=host-secret by=envhost");
}, 60_000);
