/**
 * A sandboxed stage on a worker host (`atomic worker`, a shared Postgres
 * journal): the host's own atomic home is hidden as well as the root's
 * (the root names only its own home; the host adds its own when it takes
 * the stage: src/fleet/host.ts), and the stage's work in the host's
 * workdir succeeds.
 */

import { afterEach, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { removeTempDirs } from "../helpers/temp.ts";
import { fixture } from "../e2e/support.ts";
import { startHost, stopHosts } from "./support.ts";

beforeAll(async () => {
  await testPostgres();
});
const outside: string[] = [];
afterEach(async () => {
  await stopHosts();
  await killSpawned();
  removeTempDirs();
  for (const d of outside.splice(0)) rmSync(d, { recursive: true, force: true });
});

test("a sandboxed stage on a worker host sees neither the host's atomic home nor the root's", async () => {
  const url = await freshDatabase("fleet");
  // Outside /tmp (a sandbox's /tmp is its own, which would hide them anyway): /var/tmp, visible read-only inside.
  const dir = mkdtempSync("/var/tmp/atomic-fleet-sbx-");
  outside.push(dir);
  const host = await startHost({ url, id: "boxed", slots: 1, home: join(dir, "host") });
  writeFileSync(join(host.home, "planted-secret"), "host secret\n");
  const root = join(dir, "root");
  const probe = [
    `cat ${join(host.home, "planted-secret")} >/dev/null 2>&1 && echo HOST_HOME=read || echo HOST_HOME=denied`,
    `ls ${root} >/dev/null 2>&1 && [ -n "$(ls -A ${root})" ] && echo ROOT_HOME=read || echo ROOT_HOME=denied`,
    `echo done > result.txt && echo WORK=done`,
  ].join("\n");
  const r = await runAtomic(["run", fixture("sandboxed.ts"), "--journal", url, "--workers", "0", "--json", "--input", `shell=${probe}`, "--input", "sandbox=true"], { home: root });
  expect(r.code).toBe(0);
  const outputs = JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs;
  for (const seen of ["HOST_HOME=denied", "ROOT_HOME=denied", "WORK=done"]) expect(outputs.text).toContain(seen);
  expect(readFileSync(join(host.workdir, "result.txt"), "utf8")).toBe("done\n");
}, 90_000);
