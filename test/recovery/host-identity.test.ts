/**
 * Host identity in leases (issue 12, item 7), through the binary: a
 * crashed driver's lease is taken at once only by a process whose whole
 * host identity is the holder's (`--host-id` / ATOMIC_HOST_ID here, the
 * machine id + boot id + pid namespace by default); under another identity
 * the dead pid says nothing (it may be a live process of another host), so
 * `resume` refuses, naming the holder, until the lease expires.
 */

import { expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { trackHomes } from "../helpers/homes.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "gated.ts");
const trackHome = trackHomes();

test("a crashed driver's lease: refused under another host id (naming the holder), taken at once under its own", async () => {
  const home = makeTempDir("atomic-host-id-");
  trackHome(home);
  const gate = join(home, "gate");
  writeFileSync(gate, "");
  const args = ["run", FIXTURE, "--input", `sideFile=${join(home, "side")}`, "--input", `gateFile=${gate}`, "--json"];
  // Killed between step "b"'s end and its checkpoint, with a lease that has minutes to run.
  const crashed = await runAtomic(args, { home, env: { ATOMIC_HOST_ID: "host-a", ATOMIC_FAULT_POINTS: "before-checkpoint:2" } });
  expect(crashed.code).toBe(137);
  const runId = (JSON.parse(crashed.stdout.split("\n")[0]!) as { runId: string }).runId;

  const elsewhere = await runAtomic(["resume", runId], { home, env: { ATOMIC_HOST_ID: "host-b" } });
  expect(elsewhere.code).toBe(2);
  const lines = elsewhere.stderr.trimEnd().split("\n");
  expect(lines[0]).toMatch(new RegExp(`^error: run ${runId} is being driven by another process \\(root-\\S+, pid \\d+ on host-a\\)\\.$`));
  expect(elsewhere.stderr).not.toMatch(/^\s+at /m);
  // The flag says the same as the variable, and wins over it.
  const flagged = await runAtomic(["resume", runId, "--host-id", "host-c"], { home, env: { ATOMIC_HOST_ID: "host-a" } });
  expect(flagged.code).toBe(2);
  expect(flagged.stderr).toContain("on host-a)");

  const same = await runAtomic(["resume", runId, "--json"], { home, env: { ATOMIC_HOST_ID: "host-a" } });
  expect(same.stderr).toBe("");
  expect(same.code).toBe(0);
  expect(JSON.parse(same.stdout.trim().split("\n").pop()!).outputs).toEqual({ sum: 6 });
});
