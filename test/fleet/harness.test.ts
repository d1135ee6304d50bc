/**
 * The worker-host test harness itself (test/helpers/fleet.ts), in both of
 * its modes: network namespaces (where this machine allows them) and
 * loopback (always; ATOMIC_TEST_FLEET=loopback runs only that).
 *
 * Each mode: a fleet of two hosts whose `dist/atomic` talks to the fleet's
 * Postgres; a partition stalls an open connection, a new one and the binary
 * (bounded by a timeout) while the other host carries on, and heal brings
 * all three back; killAll kills a host's process tree (also what left its
 * process group) and nothing of the other host; a test host's stop
 * (fleet/support.ts) ends its processes and none of another test host's
 * with the same host id; destroy leaves no
 * namespace, link, process, directory or cluster; and what a SIGKILLed
 * owner left is removed by the next makeFleet, or by the owner's watcher.
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import pg from "pg";
import { BUN, ROOT, childEnv, killProcessesWithHome, lineWatcher, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { type Fleet, type FleetHost, type FleetMode, FLEET_MODE_ENV, FLEET_WATCH_ENV, makeFleet, namespacesAvailable } from "../helpers/fleet.ts";
import { ip } from "../helpers/fleet/netns.ts";
import { isLive } from "../helpers/processes.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { FIXTURES, cleanUpHosts, fleetJournal, startHost, stopTheseHosts, type TestHost } from "./support.ts";

const MODES: FleetMode[] = process.env[FLEET_MODE_ENV] === "loopback" || !namespacesAvailable() ? ["loopback"] : ["netns", "loopback"];
if (!MODES.includes("netns")) console.error("fleet harness: network namespaces are not available here; only the loopback mode is tested");

const PROBE = join(import.meta.dir, "pg-probe.ts");
const FAILS_MIDWAY = join(import.meta.dir, "fails-midway.fixture.ts");
const REFUSED = join(import.meta.dir, "fleet-refused.ts");

/** What a fixture process reports it made. */
interface Made {
  tag: string;
  dir: string;
  clusterDir?: string;
  namespaces: string[];
  bridge?: string;
  pids: number[];
}
const OWNER = join(import.meta.dir, "fleet-owner.ts");
const ONE = join(FIXTURES, "one.ts");
/** How long a cut connection is watched for an answer that must not come. Not a duration under test: any length shows silence. */
const SILENCE_MS = 1500;

const namespaceList = () => ip(["netns", "list"], { allowFail: true }).output;
const linkList = () => ip(["-o", "link", "show"], { allowFail: true }).output;

function probe(host: FleetHost) {
  const proc = host.spawn([BUN, PROBE, host.postgresUrl]);
  return { proc, out: lineWatcher(proc.stdout) };
}

describe("fleet harness", () => {
  for (const mode of MODES) {
    describe(`${mode}:`, () => {
      let fleet: Fleet;
      beforeAll(async () => {
        fleet = await makeFleet({ hosts: 2, mode });
      });
      afterEach(async () => {
        for (const host of fleet?.hosts ?? []) if (host.partitioned) host.heal();
      });
      afterAll(async () => {
        await fleet?.destroy();
      });

      test("each host has its own home and host id, and dist/atomic on it reaches the fleet's Postgres", async () => {
        expect(fleet.mode).toBe(mode);
        expect(new Set(fleet.hosts.map((h) => h.home)).size).toBe(2);
        for (const host of fleet.hosts) {
          const env = await host.exec(["sh", "-c", 'echo "$ATOMIC_HOME $ATOMIC_HOST_ID"']);
          expect(env.stdout.trim()).toBe(`${host.home} ${host.id}`);
          const runs = await host.atomic(["runs", "--journal", host.postgresUrl]);
          expect(runs.stderr).toBe("");
          expect(runs.code).toBe(0);
          expect(runs.stdout).toContain("no runs yet");
        }
        if (mode === "netns") {
          expect(fleet.postgresUrl).toContain(`@${fleet.subnet}.1:`);
          for (const host of fleet.hosts) {
            const addr = await host.exec(["ip", "-4", "-o", "addr", "show", "eth0"]);
            expect(addr.stdout).toContain(`inet ${host.address}/24`);
            // No default route: nothing outside the fleet's /24 (and loopback) is reachable, so no packet leaves.
            const outside = await host.exec(["ip", "route", "get", "192.0.2.1"]);
            expect(outside.code).not.toBe(0);
            expect(outside.stderr).toContain("unreachable");
          }
        }
      });

      test("a partition silences an open connection, a new one and the binary; the other host carries on; heal answers them", async () => {
        const [a, b] = fleet.hosts as [FleetHost, FleetHost];
        const open = probe(a);
        await open.out.waitFor(/^connected$/);
        open.proc.stdin.write("1\n");
        await open.out.waitFor(/^answer 1$/);

        a.partition();
        expect(a.partitioned).toBe(true);
        open.proc.stdin.write("2\n");
        const fresh = probe(a);
        const [cut, other] = await Promise.all([a.atomic(["runs", "--journal", a.postgresUrl], { timeoutMs: SILENCE_MS * 2 }), b.atomic(["runs", "--journal", b.postgresUrl]), Bun.sleep(SILENCE_MS)]);
        expect(open.out.lines).toEqual(["connected", "answer 1"]);
        expect(fresh.out.lines).toEqual([]);
        expect(cut.timedOut || cut.code !== 0).toBe(true);
        expect(other.code).toBe(0);

        a.heal();
        // TCP's retransmissions deliver what waited, as across a cut that heals before the connection gives up.
        await open.out.waitFor(/^answer 2$/);
        await fresh.out.waitFor(/^connected$/);
        fresh.proc.stdin.write("3\n");
        await fresh.out.waitFor(/^answer 3$/);
        const healed = await a.atomic(["runs", "--journal", a.postgresUrl]);
        expect(healed.code).toBe(0);
        for (const p of [open, fresh]) p.proc.stdin.end();
        await Promise.all([open.proc.exited, fresh.proc.exited]);
      });

      // Only where the cut is the kernel's (through a relay the server's peer is the relay, which never goes silent).
      if (mode === "netns") test("with TCP keepalives configured, the server drops a partitioned host's backends by itself", async () => {
        const keepalive = await makeFleet({ hosts: 1, mode, postgresConf: ["tcp_keepalives_idle = 1", "tcp_keepalives_interval = 1", "tcp_keepalives_count = 2", "tcp_user_timeout = 3000"] });
        const admin = new pg.Client({ connectionString: keepalive.localUrl });
        try {
          await admin.connect();
          const host = keepalive.hosts[0]!;
          const backends = async () => (await admin.query("select count(*)::int as n from pg_stat_activity where client_addr = $1", [host.address])).rows[0].n as number;
          const open = probe(host);
          await open.out.waitFor(/^connected$/);
          expect(await backends()).toBe(1);
          host.partition();
          await waitUntil(async () => (await backends()) === 0, 30_000, "the server to drop the partitioned host's backend");
          host.heal();
        } finally {
          await admin.end().catch(() => {});
          await keepalive.destroy();
        }
      });

      test("after a Postgres restart (and a stop and start) the hosts reach it again", async () => {
        fleet.cluster!.restart();
        for (const host of fleet.hosts) expect((await host.atomic(["runs", "--journal", host.postgresUrl])).code).toBe(0);
        fleet.cluster!.stopServer();
        expect((await fleet.hosts[0]!.atomic(["runs", "--journal", fleet.hosts[0]!.postgresUrl], { timeoutMs: 10_000 })).code).not.toBe(0);
        fleet.cluster!.startServer();
        for (const host of fleet.hosts) expect((await host.atomic(["runs", "--journal", host.postgresUrl])).code).toBe(0);
      });

      test("killAll kills the host's whole process tree, also what left its process group, and nothing of the other host", async () => {
        const [a, b] = fleet.hosts as [FleetHost, FleetHost];
        // A child, one that left the group (setsid), an orphan (its parent gone), and an orphan without the host's
        // marker in its environment (found by its process group, and in netns mode by its namespace).
        a.spawn(["sh", "-c", "sleep 1000 & setsid sleep 1001 & (sleep 1002 &) ; (env -u ATOMIC_TEST_FLEET_HOST sleep 1003 &) ; wait"]);
        const other = b.spawn(["sleep", "1004"]);
        // Settled: the shell and its four sleeps, each exec'd (a subshell forked on its way to one is transient).
        const settled = (pids: number[]) => {
          const lines = pids.map(commandLine).sort();
          return lines.length === 5 && lines[0]!.startsWith("sh ") && lines.slice(1).join(",") === "sleep 1000,sleep 1001,sleep 1002,sleep 1003";
        };
        const tree = (await waitUntil(() => (settled(a.processes()) ? a.processes() : undefined), 10_000, "the host's process tree"))!;
        expect(tree.length).toBe(5);
        const killed = await a.killAll();
        expect(killed.sort()).toEqual(tree.sort());
        for (const pid of tree) expect(isLive(pid)).toBe(false);
        expect(a.processes()).toEqual([]);
        expect(isLive(other.pid)).toBe(true);
        expect(b.processes()).toContain(other.pid);
        await b.killAll();
        expect(isLive(other.pid)).toBe(false);
      });

      test("two test hosts with one host id, each of its own journal: stopping one ends all of its processes and none of the other's", async () => {
        // Stages that hold (sleep 1000) on each host, both hosts "twin": one on a machine of the fleet, one on this
        // machine, as two tests in two lanes may have. Their stages both carry ATOMIC_WORKER_ID=…@twin.
        const journals = [await fleetJournal(fleet), await fleetJournal(fleet)];
        const dir = makeTempDir("atomic-fleet-twins-");
        const roots = [join(dir, "root-a"), join(dir, "root-b")];
        try {
          const a = await startHost({ ...journals[0]!.machine(0), id: "twin", slots: 1 });
          const b = await startHost({ url: journals[1]!.url, id: "twin", slots: 1 });
          for (const [i, home] of roots.entries()) {
            const root = spawnAtomic(["run", ONE, "--workers", "0", "--input", `marks=${join(dir, `marks-${i}`)}`, "--input", "seconds=1000"], { home, env: { ATOMIC_JOURNAL: journals[i]!.url } });
            for (const stream of [root.stdout, root.stderr]) void new Response(stream).text();
          }
          const stageOf = (h: TestHost) => waitUntil(() => h.processes().find((pid) => commandLine(pid) === "sleep 1000"), 60_000, `the stage on host ${h.home}`);
          const [stageA, stageB] = [(await stageOf(a))!, (await stageOf(b))!];
          const ofB = [b.proc.pid, stageB, parentOf(stageB)];
          await stopTheseHosts([a]);
          expect(isLive(stageA)).toBe(false);
          expect(a.processes()).toEqual([]);
          for (const pid of ofB) expect(isLive(pid)).toBe(true);
          expect(b.processes()).toEqual(expect.arrayContaining(ofB));
          await stopTheseHosts([b]);
          for (const pid of ofB) expect(isLive(pid)).toBe(false);
        } finally {
          await cleanUpHosts();
          for (const home of roots) killProcessesWithHome(home);
        }
      });

      test("destroy leaves no namespace, link, process, directory or cluster", async () => {
        const sleepers = fleet.hosts.map((h) => h.spawn(["sh", "-c", "sleep 1000 & setsid sleep 1000 & wait"]));
        const pids = (await waitUntil(() => {
          const all = fleet.hosts.map((h) => h.processes());
          return all.every((p) => p.length >= 3) ? all.flat() : undefined;
        }, 10_000, "processes on every host"))!;
        const a = fleet.hosts[0]!;
        a.partition(); // destroyed while partitioned: the link goes all the same
        const names = fleet.hosts.map((h) => h.namespace).filter((n): n is string => n !== undefined);
        if (mode === "netns") {
          expect(names.length).toBe(2);
          for (const n of names) expect(namespaceList()).toContain(n);
          expect(linkList()).toContain(fleet.bridge!);
        }
        await fleet.destroy();
        expect(fleet.leftovers()).toEqual([]);
        expect(namespaceList()).not.toContain(fleet.tag);
        expect(linkList()).not.toContain(fleet.tag);
        for (const pid of pids) expect(isLive(pid)).toBe(false);
        await Promise.all(sleepers.map((s) => s.exited));
        expect(existsSync(fleet.dir)).toBe(false);
        expect(existsSync(fleet.cluster!.dir)).toBe(false);
        await fleet.destroy(); // a second call does nothing
      });
    });

    describe(`${mode}: what an owner left (SIGKILLed, or a test file that failed)`, () => {
      const owners = new Set<Subprocess>();
      afterEach(async () => {
        for (const p of owners) p.kill("SIGKILL");
        owners.clear();
      });

      async function killedOwner(opts: { watch: boolean; postgres: boolean }) {
        const proc = Bun.spawn([BUN, OWNER, mode, opts.postgres ? "postgres" : "none"], {
          stdout: "pipe",
          stderr: "inherit",
          env: childEnv({ [FLEET_WATCH_ENV]: opts.watch ? "1" : "0" }),
        });
        owners.add(proc);
        const line = await lineWatcher(proc.stdout).waitFor(/^\{/, 60_000);
        const made = JSON.parse(line) as Made;
        proc.kill("SIGKILL");
        await proc.exited;
        return made;
      }

      function gone(made: Made): boolean {
        return (
          !namespaceList().includes(made.tag) &&
          !linkList().includes(made.tag) &&
          made.pids.every((pid) => !isLive(pid)) &&
          !existsSync(made.dir) &&
          (made.clusterDir === undefined || !existsSync(made.clusterDir))
        );
      }

      test("the next makeFleet sweeps it away: processes, namespaces, links, directories, cluster", async () => {
        const made = await killedOwner({ watch: false, postgres: true });
        // Left behind (its sleeping processes were their own process groups: they survived their owner).
        expect(made.pids.every(isLive)).toBe(true);
        expect(existsSync(made.dir)).toBe(true);
        if (mode === "netns") {
          for (const n of made.namespaces) expect(namespaceList()).toContain(n);
          expect(linkList()).toContain(made.bridge!);
        }
        const next = await makeFleet({ hosts: 1, mode, postgres: false });
        try {
          expect(gone(made)).toBe(true);
        } finally {
          await next.destroy();
        }
      });

      async function failingTestFile(cleanup: "afterAll" | "none") {
        const proc = Bun.spawn([BUN, "test", "--timeout", "60000", FAILS_MIDWAY], {
          cwd: ROOT,
          stdout: "pipe",
          stderr: "pipe",
          env: childEnv({ FIXTURE_MODE: mode, FIXTURE_CLEANUP: cleanup, [FLEET_WATCH_ENV]: cleanup === "afterAll" ? "0" : "1" }),
        });
        owners.add(proc);
        const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
        expect(code).toBe(1);
        expect(err).toContain("(fail) fails with its hosts busy");
        const line = `${out}\n${err}`.split("\n").find((l) => l.startsWith("{"));
        if (!line) throw new Error(`the fixture printed no JSON line:\n${out}\n${err}`);
        return JSON.parse(line) as Made;
      }

      test("a test file that fails midway and destroys its fleet in afterAll leaves nothing once it ends", async () => {
        const made = await failingTestFile("afterAll");
        expect(gone(made)).toBe(true);
      });

      test("a test file that fails midway and never destroys its fleet leaves nothing once the watcher has looked", async () => {
        const made = await failingTestFile("none");
        await waitUntil(() => gone(made), 15_000, "the watcher to sweep the failed test file's fleet");
      });

      test("the owner's watcher sweeps it away by itself", async () => {
        const made = await killedOwner({ watch: true, postgres: false });
        await waitUntil(() => gone(made), 15_000, "the watcher to sweep the dead owner's fleet");
      });
    });
  }

  // A container that refuses namespaces, made here: an unprivileged user namespace (root inside, no rights on the
  // machine's network or mounts).
  const canUnshare = Bun.which("unshare") !== null && Bun.spawnSync(["unshare", "--user", "--map-root-user", "true"]).exitCode === 0;
  // Where this machine cannot make an unprivileged user namespace, there is no refusing container to try.
  if (canUnshare) test("where namespaces are refused, fleets run on loopback and say so once", async () => {
    const proc = Bun.spawn(["unshare", "--user", "--map-root-user", BUN, REFUSED], { stdout: "pipe", stderr: "pipe", env: childEnv({ [FLEET_MODE_ENV]: undefined }) });
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    expect(code).toBe(0);
    expect(out).toBe("loopback host-2 127.0.0.1\nloopback host-2 127.0.0.1\n");
    expect(err.match(/network namespaces are not available/g)?.length).toBe(1);
    expect(err).toContain("hosts run as processes on loopback");
  });
});

/** A process's parent (0 once it is gone). */
function parentOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return 0;
  }
}

/** A process's command line, its arguments joined by spaces ("" once it is gone). */
function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter((a) => a !== "").join(" ");
  } catch {
    return "";
  }
}
