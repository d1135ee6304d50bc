/**
 * Recovery across a fleet (src/service/host-scope.ts): two machines of a
 * test fleet (network namespaces where this machine allows them,
 * test/helpers/fleet.ts), each running `atomic serve` on one shared
 * Postgres: both services are active, each for its own host. Host a runs
 * two runs, both waiting at a gate, then is killed whole (every process,
 * as a power cut would). Host b's service adopts host a's runs once host
 * a's service lease ran out: the run whose code is pinned and whose
 * directory exists on b completes there, driven once (its workflow file was
 * deleted first: the pinned code is enough), with its side effects counted;
 * the run whose directory exists only on host a stays crashed with that
 * reason and is never driven by b. When host a comes back and starts its
 * service, that service recovers its run, once.
 */

import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { atomicBin, lineWatcher, waitUntil } from "../helpers/atomic.ts";
import { makeFleet, type Fleet, type FleetHost } from "../helpers/fleet.ts";
import { hiding } from "./support.ts";

const FIXTURE = join(import.meta.dir, "..", "service", "fixtures", "recoverable.ts");

let fleet: Fleet;
beforeAll(async () => {
  fleet = await makeFleet({
    hosts: 2,
    hostIds: ["a", "b"],
    postgresConf: ["tcp_keepalives_idle = 1", "tcp_keepalives_interval = 1", "tcp_keepalives_count = 2", "tcp_user_timeout = 3000"],
  });
}, 60_000);
afterAll(async () => {
  await fleet?.destroy();
}, 60_000);

/**
 * `atomic serve` on a host; `hide`: a directory that does not exist on this host (the hosts of a test fleet
 * share one filesystem: the service, and the drives it starts, run in a mount namespace of their own with an
 * empty tmpfs over it).
 */
function serve(host: FleetHost, hide?: string) {
  const argv = [atomicBin(), "--json", "serve", "--port", "0"];
  const hidden = hide ? [...hiding([hide]), ...argv] : argv;
  const proc = host.spawn(hidden, { env: { ATOMIC_JOURNAL: host.postgresUrl } });
  const log = lineWatcher(proc.stdout);
  void new Response(proc.stderr).text();
  const events = (type: string) =>
    log.lines
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((e) => e.type === type);
  return { proc, log, events };
}

function startRun(host: FleetHost, file: string, cwd: string, sideFile: string, gateFile: string) {
  const proc = host.spawnAtomic(["--json", "run", file, "--lease-ms", "3000", "--input", `sideFile=${sideFile}`, "--input", `gateFile=${gateFile}`, "--input", "mode=gate"], {
    cwd,
    env: { ATOMIC_JOURNAL: host.postgresUrl },
  });
  void new Response(proc.stderr).text();
  return { proc, out: lineWatcher(proc.stdout) };
}

async function runIdOf(out: ReturnType<typeof lineWatcher>): Promise<string> {
  const line = await out.waitFor(/"runId":"[0-9a-z]+"/);
  return /"runId":"([0-9a-z]+)"/.exec(line)![1]!;
}

async function shown(host: FleetHost, runId: string): Promise<{ status: string; run: { outputs: unknown } }> {
  const r = await host.atomic(["--json", "show", runId], { env: { ATOMIC_JOURNAL: host.postgresUrl } });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout);
}

async function untilStatus(host: FleetHost, runId: string, status: string): Promise<void> {
  let last = "";
  await waitUntil(async () => (last = (await shown(host, runId)).status) === status, 90_000, `run ${runId} to be ${status} (last seen ${last})`);
}

/** Side-effect lines of a run's steps a, b, gate, c (positions 0..3): how often each ran. */
function countsOf(sideFile: string, runId: string): number[] {
  const lines = existsSync(sideFile) ? readFileSync(sideFile, "utf8").split("\n") : [];
  return [0, 1, 2, 3].map((pos) => lines.filter((l) => l === `${runId}:${pos}`).length);
}

test("a host killed whole: the other host's service recovers its pinned run once; a run needing host a's directory waits for host a's service", async () => {
  const [a, b] = fleet.hosts as [FleetHost, FleetHost];
  const shared = join(fleet.dir, "shared");
  // What only host a has: a directory (hidden from host b's service) and, until it goes down, the workflow file.
  const aDisk = join(fleet.dir, "a-disk");
  const aOnly = join(aDisk, "project");
  const code = join(fleet.dir, "code-on-a");
  for (const d of [shared, aDisk, aOnly, code]) mkdirSync(d);
  const file = join(code, "recoverable.ts");
  copyFileSync(FIXTURE, file);
  const sideFile = join(fleet.dir, "side-effects");
  const gateFile = join(fleet.dir, "gate");

  // One service per host, both active on the one journal (each holds its host's service lease).
  const sa = serve(a);
  const sb = serve(b, aDisk);
  await Promise.all([sa.log.waitFor(/"type":"service_active"/), sb.log.waitFor(/"type":"service_active"/)]);

  const portable = startRun(a, file, shared, sideFile, gateFile);
  const local = startRun(a, file, aOnly, sideFile, gateFile);
  const [p, l] = await Promise.all([runIdOf(portable.out), runIdOf(local.out)]);
  await Promise.all([portable.out.waitFor(/at the gate/), local.out.waitFor(/at the gate/)]);

  // Host a goes down whole: its service and both drivers. Its workflow file goes with it.
  await a.killAll();
  rmSync(code, { recursive: true });
  writeFileSync(gateFile, "open");

  // Host b's service adopts host a (its service lease ran out) and drives the pinned run, once.
  await untilStatus(b, p, "completed");
  expect((await shown(b, p)).run.outputs).toEqual({ sum: 6, answer: "" });
  expect(countsOf(sideFile, p)).toEqual([1, 1, 2, 1]);
  const note = await sb.log.waitFor(new RegExp(`run ${l} of host a stays crashed`));
  expect(note).toContain(`the directory it ran in, ${aOnly}, no longer exists`);
  expect((await shown(b, l)).status).toBe("crashed");
  expect(sb.events("drive_started").map((e) => [e.runId, e.host])).toEqual([[p, "a"]]);
  expect(sb.events("run_left")).toEqual([]);

  // Host a is back: its own service recovers its run, once; b's adoption ends.
  const again = serve(a);
  await again.log.waitFor(/"type":"service_active"/);
  await untilStatus(a, l, "completed");
  expect(countsOf(sideFile, l)).toEqual([1, 1, 2, 1]);
  expect(again.events("drive_started").map((e) => e.runId)).toEqual([l]);
  expect(sb.events("drive_started").map((e) => e.runId)).toEqual([p]);

  for (const s of [again, sb]) s.proc.kill("SIGTERM");
  expect(await Promise.all([again.proc.exited, sb.proc.exited])).toEqual([0, 0]);
}, 240_000);
