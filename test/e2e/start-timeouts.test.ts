/**
 * The start timeouts and the child-run depth of the config file, through
 * the real binary: a broker that does not answer within
 * timeouts.brokerStartMs (a live process holds the spawn lock and starts
 * none), a worker that never says ready within timeouts.workerStartMs (the
 * `worker-before-ready` fault point hangs it: killed, restarted, and the
 * pool fails after three), maxChildDepth both ways, and every value out of
 * its range refused in one sentence before anything runs.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { intercomPaths, ensurePrivateDirs } from "../../src/intercom/paths.ts";
import { hostId } from "../../src/shared/process-info.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, makeTempDir, startedRunId } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

function homeWith(config: unknown): string {
  const home = makeTempDir();
  writeFileSync(join(home, "config.json"), JSON.stringify(config));
  return home;
}

e2eTest("maxChildDepth: 1 fails a second level (child_depth) naming the limit; 2 lets it run", async () => {
  const shallow = await runAtomic(["run", fixture("nest.ts"), "--input", "levels=2"], { home: homeWith({ maxChildDepth: 1 }) });
  expect(shallow.code).toBe(1);
  expect(shallow.stderr).toContain('child workflow "nest" would run at depth 2; the limit is 1');
  const deeper = await runAtomic(["run", fixture("nest.ts"), "--input", "levels=2"], { home: homeWith({ maxChildDepth: 2 }) });
  expect(deeper.code).toBe(0);
  expect(deeper.stdout).toMatch(/^2$/m);
});

e2eTest("values out of range are refused in one sentence with a hint, exit 2, before anything runs", async () => {
  for (const [config, key, must] of [
    [{ maxChildDepth: 11 }, "maxChildDepth", "a whole number from 1 to 10"],
    [{ maxChildDepth: 0 }, "maxChildDepth", "a whole number from 1 to 10"],
    [{ timeouts: { brokerStartMs: 500 } }, "timeouts.brokerStartMs", "a whole number from 1000 to 600000"],
    [{ timeouts: { workerStartMs: "30s" } }, "timeouts.workerStartMs", "a whole number from 1000 to 600000"],
  ] as const) {
    const home = homeWith(config);
    const r = await runAtomic(["run", fixture("nest.ts"), "--input", "levels=0"], { home });
    expect(r.code).toBe(2);
    const { message, hint } = expectOneSentenceError(r.stderr);
    expect(message).toBe(`"${key}" in ${join(home, "config.json")} must be ${must}.`);
    expect(hint).toContain("docs/reference/config.md");
    expect(r.stdout).not.toContain("started run");
  }
});

e2eTest("timeouts.brokerStartMs: a broker that does not answer in time is reported with the timeout", async () => {
  const home = homeWith({ timeouts: { brokerStartMs: 1000 } });
  // A live process of this host (this test) holds the spawn lock and never starts a broker: the command waits its timeout.
  const paths = intercomPaths(home);
  ensurePrivateDirs(paths);
  writeFileSync(paths.lockFile, JSON.stringify({ pid: process.pid, host: hostId(), at: Date.now(), token: "held-by-the-test" }), { mode: 0o600 });
  const r = await runAtomic(["sessions"], { home });
  expect(r.code).toBe(1);
  expect(r.stderr).toContain("the intercom broker did not start within 1000 ms");
  expect(JSON.parse(readFileSync(paths.lockFile, "utf8")).token).toBe("held-by-the-test");
});

e2eTest("timeouts.workerStartMs: a worker that never says ready is killed in time, and three such fail the run", async () => {
  const home = homeWith({ timeouts: { workerStartMs: 1000 } });
  const r = await runAtomic(["run", fixture("exit-as.ts"), "--input", "status=completed", "--workers", "1"], {
    home,
    env: { ATOMIC_FAULT_POINTS: "worker-before-ready:*", ATOMIC_FAULT_ACTION: "hang" },
  });
  expect(r.code).toBe(1);
  const id = startedRunId(r.stdout);
  expect(r.stderr).toContain(`run ${id} failed`);
  expect(r.stderr).toContain("workers fail to start");
  const log = readFileSync(join(home, "artifacts", id, "worker-logs", "coordinator.log"), "utf8");
  expect(log.match(/did not start within 1000 ms/g)?.length).toBeGreaterThanOrEqual(3);
});
