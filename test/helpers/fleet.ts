/**
 * Test fleets: several "machines" running atomic against one Postgres, made
 * by the test itself and removed afterwards, for the worker-host tests.
 *
 *   const fleet = await makeFleet({ hosts: 3 });
 *   afterAll(() => fleet.destroy());
 *   const [a, b] = fleet.hosts;
 *   const w = a.spawnAtomic(["worker", "--journal", a.postgresUrl, "--host-id", a.id]);
 *   b.partition(); ... b.heal();
 *   await a.killAll();                      // kill -9 of the whole host
 *
 * (`spawn`'s stdout and stderr are pipes: read or drain both, lineWatcher or
 * `new Response(p.stdout).text()`, or a chatty process blocks on a full one.)
 *
 * Two modes, one API:
 *
 * - netns (where this process may make network namespaces: root, and a
 *   kernel/container that allows it): a bridge in the test's namespace with
 *   the first address of a /24 picked at random from 10.0.0.0/8 or
 *   100.64.0.0/10 and checked against every address and route of the
 *   machine; each host a namespace with loopback and a veth pair to the
 *   bridge, no default route (it reaches the bridge, the other hosts and its
 *   loopback only). The fleet's own Postgres cluster listens on the bridge
 *   address and 127.0.0.1, pg_hba admitting the /24 with scram. Hosts run
 *   commands through `ip netns exec`. A partition sets the bridge-side veth
 *   end down: silence in both directions, as when a cable is pulled
 *   (fleet/netns.ts says why not routes or eth0 down).
 * - loopback (namespaces refused, or ATOMIC_TEST_FLEET=loopback): hosts are
 *   plain processes on 127.0.0.1; each reaches Postgres through a TCP relay
 *   of its own in this process, and a partition stops that relay (the same
 *   silence for Postgres traffic; fleet/proxy.ts). Said once on stderr.
 *   Only Postgres traffic is cut there: hosts talk to nothing else.
 *
 * Why not the relay in both modes: in netns mode the cut is the kernel's,
 * so keepalives, retransmission timeouts, ARP failure and a server that
 * sees its client vanish all behave as on a real network, which is what
 * the partition tests are about; the relay is the nearest a loopback host
 * can get (its kernel still completes the TCP handshake).
 *
 * Each host has its own ATOMIC_HOME, host id (ATOMIC_HOST_ID), temp and
 * runtime directory and work directory, and a marker in its environment
 * (ATOMIC_TEST_FLEET_HOST) that every process it starts inherits. What a
 * host spawns is a process group of its own (setsid) and is tracked:
 * `processes()` is everything in its namespace, marked, or descended from
 * what it spawned; `killAll()` stops them all, then SIGKILLs them (a host
 * crash: fleet/kill.ts).
 *
 * Cleanup: `destroy()` kills every host's processes, closes the relays,
 * stops the cluster and removes namespaces, links and directories, then
 * checks that nothing of the fleet is left (and throws if something is).
 * Fleets still alive when the process exits are destroyed by an exit
 * handler; as bun test may end without one, and a test process may be
 * SIGKILLed, every owner also starts a watcher that sweeps once it is gone,
 * and each `makeFleet` first sweeps what dead owners left (fleet/sweep.ts,
 * fleet/names.ts: everything is named after its owner's pid).
 */

import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { atomicBin, childEnv, TEST_CONFIG } from "./atomic.ts";
import { streamLines } from "./lines.ts";
import { type Cluster, startCluster, sweepStaleClusters, watchOwner } from "./postgres.ts";
import { isLive } from "./processes.ts";
import { crash, markedProcesses, signalAll, withDescendants } from "./fleet/kill.ts";
import { DIR_PREFIX, HOST_MARKER, belongsTo, bridgeName, namespaceName, newTag, vethName } from "./fleet/names.ts";
import { type NetnsHost, fleetNetworkNames, freeSubnet, makeNetwork, namespacePids, netnsSupport, removeNetwork, setLink, subnetShared } from "./fleet/netns.ts";
import { type Relay, startRelay } from "./fleet/proxy.ts";
import { ownerRecord, sweepStaleFleets } from "./fleet/sweep.ts";

export type FleetMode = "netns" | "loopback";
export const FLEET_MODE_ENV = "ATOMIC_TEST_FLEET";
/** Set to 0 in a process whose fleets the stale sweep is to find (the sweep test): no watcher then. */
export const FLEET_WATCH_ENV = "ATOMIC_TEST_FLEET_WATCH";

export interface FleetOptions {
  hosts: number;
  /** Default: netns where possible, else loopback; ATOMIC_TEST_FLEET=loopback forces loopback. */
  mode?: FleetMode;
  /** Host ids (default host-1, host-2, …). */
  hostIds?: string[];
  /** Start the fleet's Postgres cluster (default true). */
  postgres?: boolean;
  /**
   * More postgresql.conf settings for it. A partitioned host's backends (and the locks of their open
   * transactions) live until the server notices the connection is dead, as on a real network: with
   * Linux's defaults after 2 h of silence (TCP keepalive) or about 15 min of retransmitting what it sent.
   * `tcp_keepalives_idle = 1`, `tcp_keepalives_interval = 1`, `tcp_keepalives_count = 2` and
   * `tcp_user_timeout = 3000` make that seconds (loopback mode: through a relay the server's peer is the
   * relay, which answers for the host, so it never notices).
   */
  postgresConf?: string[];
}

export interface ExecOptions {
  env?: Record<string, string | undefined>;
  /** Default: the host's work directory. */
  cwd?: string;
  stdin?: string;
  /** `exec` kills the command's process group after this long (default 60 s) and reports `timedOut`. */
  timeoutMs?: number;
}

export interface ExecResult {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

export interface FleetHost {
  index: number;
  /** Its host id, also in its environment as ATOMIC_HOST_ID. */
  id: string;
  home: string;
  /** A directory of its own for `--workdir` and as the default cwd. */
  workdir: string;
  /** Its address: 10.x.y.n / 100.x.y.n in netns mode, 127.0.0.1 in loopback mode. */
  address: string;
  /** Its namespace (netns mode). */
  namespace?: string;
  /** The fleet's Postgres as this host reaches it (partitions apply to it); use this, not fleet.postgresUrl, for what runs on the host. */
  postgresUrl: string;
  /** The environment every command of the host gets (before its own `env`). */
  env: Record<string, string>;
  readonly partitioned: boolean;
  spawn(argv: string[], opts?: ExecOptions): Subprocess<"pipe", "pipe", "pipe">;
  exec(argv: string[], opts?: ExecOptions): Promise<ExecResult>;
  spawnAtomic(args: string[], opts?: ExecOptions): Subprocess<"pipe", "pipe", "pipe">;
  atomic(args: string[], opts?: ExecOptions): Promise<ExecResult>;
  /** Cuts the host off the network (Postgres and the other hosts); loopback stays. */
  partition(): void;
  heal(): void;
  /** SIGKILL (default): every process of the host stopped, then killed, returning when all are gone. Another signal: sent once to each. */
  killAll(signal?: NodeJS.Signals): Promise<number[]>;
  /** Pids of the live processes of the host. */
  processes(): number[];
}

export interface Fleet {
  mode: FleetMode;
  tag: string;
  /** The fleet's temp directory (the hosts' directories are in it). */
  dir: string;
  hosts: FleetHost[];
  /** The bridge and the subnet's first three octets (netns mode). */
  bridge?: string;
  subnet?: string;
  cluster?: Cluster;
  /** The cluster at the bridge address (netns mode; 127.0.0.1 in loopback mode, bypassing the relays). */
  postgresUrl: string;
  /** The cluster at 127.0.0.1, for the test itself. */
  localUrl: string;
  destroy(): Promise<void>;
  /** What of the fleet still exists (empty after destroy). */
  leftovers(): string[];
}

// ---------------------------------------------------------------- mode

let announced = false;

/** The mode a fleet gets when it asks for none. */
export function defaultFleetMode(): FleetMode {
  if (process.env[FLEET_MODE_ENV] === "loopback") return "loopback";
  const support = netnsSupport();
  if (support.ok) return "netns";
  if (process.env[FLEET_MODE_ENV] === "netns") throw new Error(`${FLEET_MODE_ENV}=netns, but network namespaces are not available: ${support.reason}`);
  if (!announced) {
    announced = true;
    process.stderr.write(`test fleet: network namespaces are not available (${support.reason}); hosts run as processes on loopback, partitions through a relay\n`);
  }
  return "loopback";
}

export function namespacesAvailable(): boolean {
  return netnsSupport().ok;
}

// ---------------------------------------------------------------- making one

const live = new Set<Fleet>();
let watching = false;

function onExit(): void {
  for (const fleet of live) {
    try {
      teardown(fleet as FleetState);
    } catch (err) {
      process.stderr.write(`${(err as Error).message}\n`);
    }
  }
}

interface FleetState extends Fleet {
  relays: Relay[];
  spawned: Set<number>[];
  groups: Set<number>[];
  torn: boolean;
}

export async function makeFleet(opts: FleetOptions): Promise<Fleet> {
  if (!(opts.hosts >= 1 && opts.hosts <= 250)) throw new Error(`makeFleet: hosts must be 1..250, not ${opts.hosts}`);
  sweepStaleFleets();
  sweepStaleClusters();
  const mode = opts.mode ?? defaultFleetMode();
  const support = netnsSupport();
  if (mode === "netns" && !support.ok) throw new Error(`network namespaces are not available: ${support.reason}`);
  if (!watching) {
    watching = true;
    process.once("exit", onExit);
    if (process.env[FLEET_WATCH_ENV] !== "0") watchOwner(process.pid, [process.execPath, join(import.meta.dir, "fleet", "sweep.ts")]);
  }
  const tag = newTag();
  const dir = join(tmpdir(), `${DIR_PREFIX}${tag}`);
  mkdirSync(dir, { mode: 0o700 });
  writeFileSync(join(dir, "owner"), ownerRecord());
  const fleet: FleetState = {
    mode,
    tag,
    dir,
    hosts: [],
    postgresUrl: "",
    localUrl: "",
    relays: [],
    spawned: [],
    groups: [],
    torn: false,
    destroy: async () => teardown(fleet),
    leftovers: () => leftovers(fleet),
  };
  live.add(fleet);
  try {
    let network: NetnsHost[] = [];
    if (mode === "netns") {
      const bridge = bridgeName(tag);
      fleet.bridge = bridge;
      for (let attempt = 0; ; attempt++) {
        const subnet = freeSubnet();
        network = makeNetwork({ bridge, namespace: (i) => namespaceName(tag, i), veth: (i) => vethName(tag, i) }, subnet, opts.hosts);
        if (!subnetShared(subnet)) {
          fleet.subnet = subnet;
          break;
        }
        removeNetwork(network.map((h) => h.namespace), [bridge, ...network.map((h) => h.veth)]);
        if (attempt >= 5) throw new Error("every free /24 picked was taken by another fleet at the same moment");
      }
    }
    if (opts.postgres !== false) {
      fleet.cluster = await startCluster({
        listen: fleet.subnet ? ["127.0.0.1", `${fleet.subnet}.1`] : ["127.0.0.1"],
        hba: fleet.subnet ? [`host all all ${fleet.subnet}.0/24 scram-sha-256`] : [],
        conf: opts.postgresConf,
      });
      fleet.localUrl = fleet.cluster.adminUrl;
      fleet.postgresUrl = fleet.subnet ? withHost(fleet.localUrl, `${fleet.subnet}.1`) : fleet.localUrl;
    }
    for (let i = 0; i < opts.hosts; i++) fleet.hosts.push(await makeFleetHost(fleet, i, opts.hostIds?.[i] ?? `host-${i + 1}`, network[i]));
    return fleet;
  } catch (err) {
    teardown(fleet);
    throw err;
  }
}

function withHost(url: string, host: string, port?: number): string {
  const u = new URL(url);
  u.hostname = host;
  if (port !== undefined) u.port = String(port);
  return u.toString();
}

async function makeFleetHost(fleet: FleetState, index: number, id: string, network: NetnsHost | undefined): Promise<FleetHost> {
  const hostDir = join(fleet.dir, `h${index}`);
  const home = join(hostDir, "home");
  const workdir = join(hostDir, "work");
  const tmp = join(hostDir, "tmp");
  for (const d of [hostDir, home, workdir, tmp]) mkdirSync(d, { mode: 0o700 });
  const namespace = network?.namespace;
  const address = network?.address ?? "127.0.0.1";
  let postgresUrl = fleet.postgresUrl;
  let relay: Relay | undefined;
  if (!network && fleet.cluster) {
    relay = await startRelay({ host: "127.0.0.1", port: fleet.cluster.port });
    fleet.relays.push(relay);
    postgresUrl = withHost(fleet.localUrl, "127.0.0.1", relay.port);
  }
  const spawned = new Set<number>();
  // Every process group it spawned (each spawn is its own, led by the spawned pid), kept after the leader ends.
  const groups = new Set<number>();
  fleet.spawned.push(spawned);
  fleet.groups.push(groups);
  const marker = namespaceName(fleet.tag, index);
  // The binary gets what a user's machine would give it: its home, host id and the test config (no load
  // pacing), not the tests' Postgres admin URL; host-wide runtime state stays in the host's directory.
  const env = childEnv({
    NO_COLOR: "1",
    ATOMIC_HOME: home,
    ATOMIC_HOST_ID: id,
    ATOMIC_CONFIG: TEST_CONFIG,
    ATOMIC_TEST_POSTGRES_URL: undefined,
    ATOMIC_JOURNAL: undefined,
    TMPDIR: tmp,
    XDG_RUNTIME_DIR: tmp,
    [HOST_MARKER]: marker,
  });
  let partitioned = false;
  const processes = () => {
    const pids = new Set([...markedProcesses(marker).map((p) => p.pid), ...withDescendants(spawned, groups)]);
    if (namespace) for (const pid of namespacePids(namespace)) pids.add(pid);
    return [...pids].filter((pid) => pid !== process.pid && isLive(pid));
  };
  const spawn = (argv: string[], opts: ExecOptions = {}) => {
    const command = namespace ? ["ip", "netns", "exec", namespace, ...argv] : argv;
    const proc = Bun.spawn(command, {
      cwd: opts.cwd ?? workdir,
      env: withEnv(env, opts.env),
      stdin: opts.stdin !== undefined ? new Blob([opts.stdin]) : "pipe",
      stdout: "pipe",
      stderr: "pipe",
      detached: true,
    }) as Subprocess<"pipe", "pipe", "pipe">;
    spawned.add(proc.pid);
    groups.add(proc.pid);
    void proc.exited.then(() => spawned.delete(proc.pid));
    return proc;
  };
  const exec = (argv: string[], opts: ExecOptions = {}) => runToEnd(spawn(argv, opts), opts.timeoutMs ?? 60_000);
  return {
    index,
    id,
    home,
    workdir,
    address,
    namespace,
    postgresUrl,
    env,
    get partitioned() {
      return partitioned;
    },
    spawn,
    exec,
    spawnAtomic: (args, opts) => spawn([atomicBin(), ...args], opts),
    atomic: (args, opts) => exec([atomicBin(), ...args], opts),
    partition() {
      if (fleet.torn) throw new Error(`fleet ${fleet.tag} is destroyed: there is no host ${id} to partition`);
      if (network) setLink(network.veth, "down");
      else relay?.cut();
      partitioned = true;
    },
    heal() {
      if (fleet.torn) return; // destroyed meanwhile: nothing left to heal
      if (network) setLink(network.veth, "up");
      else relay?.mend();
      partitioned = false;
    },
    async killAll(signal: NodeJS.Signals = "SIGKILL") {
      if (signal !== "SIGKILL") return signalAll(processes, signal);
      return crash(processes);
    },
    processes,
  };
}

/** `base` with `extra` over it (an undefined value removes the variable). */
function withEnv(base: Record<string, string>, extra: Record<string, string | undefined> = {}): Record<string, string> {
  const env = { ...base };
  for (const [k, v] of Object.entries(extra)) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}

/** Runs a spawned command to its end (or kills its group at the timeout), collecting its output. */
async function runToEnd(proc: Subprocess<"pipe", "pipe", "pipe">, timeoutMs: number): Promise<ExecResult> {
  let timedOut = false;
  // Its process group and whatever left it (setsid) meanwhile.
  const timer = setTimeout(() => {
    timedOut = true;
    crash(() => withDescendants([proc.pid]));
    try {
      process.kill(-proc.pid, "SIGKILL"); // what was orphaned into the group before
    } catch {
      // no such group any more
    }
  }, timeoutMs);
  const [stdout, stderr] = await Promise.all([collect(proc.stdout), collect(proc.stderr), proc.exited]);
  clearTimeout(timer);
  return { code: proc.exitCode, signal: proc.signalCode === null ? null : String(proc.signalCode), stdout, stderr, timedOut };
}

async function collect(stream: ReadableStream<Uint8Array>): Promise<string> {
  const lines: string[] = [];
  for await (const batch of streamLines(stream)) lines.push(...batch);
  return lines.length > 0 ? `${lines.join("\n")}\n` : "";
}

// ---------------------------------------------------------------- removing one

function teardown(fleet: FleetState): void {
  if (fleet.torn) return;
  fleet.torn = true;
  const errors: unknown[] = [];
  const step = (fn: () => void) => {
    try {
      fn();
    } catch (err) {
      errors.push(err);
    }
  };
  for (const host of fleet.hosts) step(() => crash(host.processes));
  // Processes spawned before their host was complete (a failure midway through makeFleet).
  step(() => crash(() => [...markedProcesses().filter((p) => belongsTo(p.value, fleet.tag)).map((p) => p.pid), ...withDescendants(fleet.spawned.flatMap((s) => [...s]), new Set(fleet.groups.flatMap((g) => [...g])))]));
  for (const relay of fleet.relays) step(() => relay.close());
  if (fleet.cluster) step(() => fleet.cluster!.stop());
  if (fleet.mode === "netns") {
    step(() => {
      const { namespaces, links } = ownNetwork(fleet);
      removeNetwork(namespaces, links);
    });
  }
  step(() => rmSync(fleet.dir, { recursive: true, force: true }));
  live.delete(fleet);
  const left = leftovers(fleet);
  if (left.length > 0) errors.push(new Error(`fleet ${fleet.tag} left behind: ${left.join("; ")}`));
  if (errors.length > 0) throw errors.length === 1 ? errors[0] : new AggregateError(errors, `destroying fleet ${fleet.tag} failed`);
}

function ownNetwork(fleet: Fleet): { namespaces: string[]; links: string[] } {
  const { namespaces, links } = fleetNetworkNames();
  const ours = (n: string) => belongsTo(n, fleet.tag);
  return { namespaces: namespaces.filter(ours), links: links.filter(ours) };
}

function leftovers(fleet: Fleet): string[] {
  const left: string[] = [];
  const { namespaces, links } = ownNetwork(fleet);
  if (namespaces.length > 0) left.push(`namespaces ${namespaces.join(", ")}`);
  if (links.length > 0) left.push(`links ${links.join(", ")}`);
  const procs = markedProcesses().filter((p) => belongsTo(p.value, fleet.tag));
  if (procs.length > 0) left.push(`processes ${procs.map((p) => p.pid).join(", ")}`);
  if (existsSync(fleet.dir)) left.push(`directory ${fleet.dir}`);
  if (fleet.cluster && existsSync(fleet.cluster.dir)) left.push(`cluster ${fleet.cluster.dir}`);
  return left;
}
