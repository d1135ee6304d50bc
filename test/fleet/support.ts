/**
 * Worker hosts for the fleet tests: `atomic worker` processes (the real
 * binary), each with a home and host id of its own, on this machine's
 * loopback, or (`on`) on a machine of a test fleet (test/helpers/fleet.ts:
 * a network namespace of its own where this machine allows them, reaching
 * the fleet's Postgres over a link of its own).
 *
 * `host.processes()` are every process of the host: those carrying its home
 * (the host coordinator and its workers) and those carrying its marker
 * (HOST_ENV, a value no other host of any test has: the host's environment
 * passes it to its workers and they to their stages). Never its host id: two
 * tests that run at once may give their hosts the same one, and a stop of
 * one must not touch the other's processes. `host.kill()` is a kill -9 of
 * all of them at once, as a power cut of that machine would be (stopped
 * first, so none forks past it: helpers/fleet/kill.ts `crash`).
 */

import { afterAll, afterEach, beforeAll } from "bun:test";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import type { Fleet, FleetHost } from "../helpers/fleet.ts";
import { createDatabase, startCluster, withDatabase, type Cluster } from "../helpers/postgres.ts";
import { killSpawned, lineWatcher, spawnAtomic } from "../helpers/atomic.ts";
import { crash } from "../helpers/fleet/kill.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { concurrentTest } from "../helpers/concurrent.ts";

export interface TestHost {
  id: string;
  home: string;
  workdir: string;
  proc: Subprocess<"pipe", "pipe", "pipe">;
  log: ReturnType<typeof lineWatcher>;
  processes(): number[];
  /** SIGKILL of every process of the host (coordinator, workers, stages). */
  kill(): void;
  exited: Promise<number>;
}

export interface HostOptions {
  url: string;
  id: string;
  slots?: number;
  queues?: string[];
  workdir?: string;
  leaseMs?: number;
  grace?: string;
  env?: Record<string, string>;
  home?: string;
  /** The host's checkout of the runs' repository (`--repo`). */
  repo?: string;
  /** The fleet machine to start it on (its network; `url` as that machine reaches the journal). */
  on?: FleetHost;
  /** Directories this host does not have (other hosts' homes): see `hiding`. */
  hide?: string[];
}

/**
 * A command prefix that runs a process (and all it starts) in a mount namespace of its own with an empty tmpfs
 * over each of `dirs`: on one test machine, a host that does not share those directories with the others, as a
 * separate machine would not.
 */
export function hiding(dirs: readonly string[]): string[] {
  const mounts = dirs.map((_, i) => `mount -t tmpfs -o size=64k hidden "$${i}"`).join(" && ");
  return ["unshare", "--mount", "--propagation", "private", "sh", "-c", `${mounts} && shift ${dirs.length - 1} && exec "$@"`, ...dirs];
}

const hosts = new Set<TestHost>();

/** The variable whose value marks every process of one test host (an ATOMIC_ name: a worker gives it to its stages, runners/stage-env.ts). */
export const HOST_ENV = "ATOMIC_TEST_HOST";
let started = 0;

export async function startHost(o: HostOptions): Promise<TestHost> {
  const home = o.home ?? makeTempDir(`atomic-host-${o.id}-`);
  const workdir = o.workdir ?? makeTempDir(`atomic-work-${o.id}-`);
  // The journal (its password) through the environment, as a user would keep it out of argv.
  const args = ["worker", "--host-id", o.id, "--slots", String(o.slots ?? 2), "--workdir", workdir];
  if (o.queues) args.push("--queues", o.queues.join(","));
  if (o.leaseMs) args.push("--work-lease-ms", String(o.leaseMs));
  if (o.grace) args.push("--grace", o.grace);
  if (o.repo) args.push("--repo", o.repo);
  const wrap = o.hide?.length ? { wrap: hiding(o.hide) } : {};
  const marker = `${process.pid}-${++started}-${Math.random().toString(36).slice(2, 8)}`;
  const env = { ATOMIC_JOURNAL: o.url, ...o.env, [HOST_ENV]: marker };
  const proc = o.on ? o.on.spawnAtomic(args, { env: { ATOMIC_HOME: home, ATOMIC_HOST_ID: o.id, ...env } }) : spawnAtomic(args, { home, ...wrap, env });
  const log = lineWatcher(proc.stderr);
  void new Response(proc.stdout).text();
  const host: TestHost = {
    id: o.id,
    home,
    workdir,
    proc,
    log,
    processes: () => hostProcesses(home, marker),
    kill: () => void crash(() => hostProcesses(home, marker)),
    exited: proc.exited,
  };
  hosts.add(host);
  await log.waitFor(/worker host ready/, 30_000);
  return host;
}

/**
 * These hosts of one test, killed whole once it is done with them: in a file whose tests run side by side the
 * afterEach cleanup waits until none runs (helpers/concurrent.ts `whenIdle`), and an idle host polls its journal
 * every second until then.
 */
export async function stopTheseHosts(these: TestHost[]): Promise<void> {
  for (const h of these) {
    h.kill();
    hosts.delete(h);
  }
  await Promise.all(these.map((h) => h.exited));
}

/**
 * A test of a file whose tests run side by side (helpers/concurrent.ts) that starts hosts with `start` (startHost's
 * options): they are stopped whole once it ends, passed or failed (stopTheseHosts), not when the file's last test
 * does. Its hosts may have the ids another test's have: a host's stop ends only its own processes.
 */
export function concurrentHostTest(name: string, fn: (start: (o: HostOptions) => Promise<TestHost>) => Promise<void>, timeoutMs?: number): void {
  concurrentTest(
    name,
    async () => {
      const started: TestHost[] = [];
      try {
        await fn(async (o) => {
          const host = await startHost(o);
          started.push(host);
          return host;
        });
      } finally {
        await stopTheseHosts(started);
      }
    },
    timeoutMs,
  );
}

/** Every host a test started: killed whole (afterEach). */
export async function stopHosts(): Promise<void> {
  for (const h of hosts) h.kill();
  await Promise.all([...hosts].map((h) => h.exited));
  hosts.clear();
}

/** A fleet test's afterEach: its hosts, then every other process it spawned, then its temp directories. */
export async function cleanUpHosts(): Promise<void> {
  await stopHosts();
  await killSpawned();
  removeTempDirs();
}

/** Live processes of the host whose home is `home` and marker `marker` (startHost). */
function hostProcesses(home: string, marker: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const env = readFileSync(`/proc/${name}/environ`, "utf8").split("\0");
      if (!env.includes(`ATOMIC_HOME=${home}`) && !env.includes(`${HOST_ENV}=${marker}`)) continue;
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      if (stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z") pids.push(Number(name));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids;
}

/** Windows and leases longer than the outage tests' outages (25-80 s): a root or a service's drive rides one out. */
export const RIDE_OUT = { journalRetryMs: 120_000, leaseMs: 150_000 };

/** The seed of a file's random outages: `FC_SEED=<seed>` (printed in the test names) replays them. */
export const OUTAGE_SEED = Number(process.env.FC_SEED?.trim() || Date.now() % 2 ** 31);

/** A Postgres cluster of the calling file's own (its tests stop and start the server); hosts cleaned up after each test. */
export function clusterOfThisFile(): () => Cluster {
  let cluster: Cluster | undefined;
  beforeAll(async () => {
    cluster = await startCluster();
  });
  afterEach(cleanUpHosts);
  afterAll(() => cluster?.stop());
  return () => cluster!;
}

/** Lines of a marks file (each stage appends one line per execution). */
export function marks(file: string): string[] {
  try {
    return readFileSync(file, "utf8").split("\n").filter((l) => l !== "");
  } catch {
    return [];
  }
}

export function counts(lines: readonly string[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const l of lines) m.set(l, (m.get(l) ?? 0) + 1);
  return m;
}

export const FIXTURES = join(import.meta.dir, "fixtures");

let databases = 0;
/**
 * A fresh journal in a test fleet's Postgres: its URL for a root on this machine, and `machine(i)` (the URL as
 * the fleet's machine i reaches it, and the machine) for `startHost` there.
 */
export async function fleetJournal(fleet: Fleet) {
  const name = `fleet_${process.pid}_${++databases}`;
  const url = await createDatabase(fleet.cluster!, name);
  return { url, machine: (i: number) => ({ url: withDatabase(fleet.hosts[i]!.postgresUrl, name), on: fleet.hosts[i]! }) };
}
