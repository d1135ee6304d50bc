/**
 * The service and a worker host in one Postgres outage: `atomic serve`
 * drives a run whose stages run on an `atomic worker` host (the real
 * binary, both on this file's own cluster), and the server goes away for
 * 25-80 s (seeded; `FC_SEED=<seed>` in the test names replays it) while
 * the host runs a stage. Each stage waits at a gate the test opens
 * (fixtures/gated.ts), so the outage starts mid-stage and a stage ends
 * during it.
 *
 * The service is set to ride the outage out, as the worker-host tests'
 * root is (host-outage-random.test.ts): `--lease-ms` for the runs it
 * drives, `--work-lease-ms` for their own workers (and the host's) and its
 * retry window (ATOMIC_JOURNAL_RETRY_MS, which its drives inherit) longer
 * than the outage; the host keeps its default window, so a result that
 * ends during the outage waits in its outbox. Both modes of the service's
 * drives: `--workers 0` (every stage on the host, of 2 slots) and
 * `--workers 1` (a worker of the drive's own beside a host of 1 slot, so
 * each runs one stage through the outage: a drive's own worker held to the
 * default 30 s work lease would stop its stage and run it again).
 *
 * What holds: the service says the server is unreachable and that it
 * retries, and again when it answers; it backs off meanwhile (its CPU time
 * over the outage is a small part of the outage: a service that spun would
 * use a core); the host keeps the result of the stage that ended in its
 * outbox and commits it once the server is back, the same process; the run
 * completes under one drive of the service, each stage started once, its
 * side effect once, recorded once as completed. Durations are never
 * asserted. The two modes run at once, each on a cluster and with a host
 * of its own (outage-cases.ts): their outages overlap.
 */

import { expect } from "bun:test";
import fc from "fast-check";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { createDatabase } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { concurrentTest } from "../helpers/concurrent.ts";
import { caseHostId, clusterPerCase, endOutage } from "./outage-cases.ts";
import { FIXTURES, OUTAGE_SEED, RIDE_OUT, counts, marks, startHost } from "./support.ts";

const WF = join(FIXTURES, "gated.ts");
/** A service's CPU time over an outage stays below this part of it (one that spun would use a whole core). */
const MAX_CPU_SHARE = 0.25;
const clusterOf = clusterPerCase(2);
const SEED = OUTAGE_SEED;
const LENGTHS = fc.sample(fc.noBias(fc.integer({ min: 25_000, max: 80_000 })), { seed: SEED, numRuns: 2 });

for (const [i, workers] of [0, 1].entries()) {
  const lastsMs = LENGTHS[i]!;
  const cluster = () => clusterOf(i);
  concurrentTest(`the service (--workers ${workers}) and a worker host with postgres away for ${lastsMs / 1000} s mid-stage (FC_SEED=${SEED}): the service backs off and says so, the host keeps its result in its outbox, the run completes with every stage once`, async () => {
    const url = await createDatabase(cluster(), `sh_${Math.random().toString(36).slice(2, 8)}`);
    const dir = makeTempDir("atomic-service-host-");
    const home = join(dir, "root");
    const env = { ATOMIC_JOURNAL: url, ATOMIC_JOURNAL_RETRY_MS: String(RIDE_OUT.journalRetryMs) };
    const host = await startHost({ url, id: caseHostId(i), slots: 2 - workers, leaseMs: RIDE_OUT.leaseMs });
    const ride = ["--work-lease-ms", String(RIDE_OUT.leaseMs), "--lease-ms", String(RIDE_OUT.leaseMs)];
    const serve = spawnAtomic(["--json", "serve", "--port", "0", "--workers", String(workers), ...ride], { home, env });
    const said = lineWatcher(serve.stdout);
    const err = lineWatcher(serve.stderr);
    const events = (type: string) => said.lines.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, unknown>).filter((e) => e.type === type);
    const started = () => marks(join(dir, "started"));
    try {
      await said.waitFor(/"type":"service_active"/, 60_000);
      const detached = await runAtomic(["run", WF, "--detach", "--input", "stages=2", "--input", `dir=${dir}`], { home, env });
      expect(detached.code).toBe(0);
      const id = detached.stdout.split("\n")[0]!.trim();
      await waitUntil(() => started().length === 2, 60_000, "both stages running");
      // The stage the host runs ends during the outage (with one worker of the drive's own, the other runs there).
      const onHost = hostStage(host.processes(), started());
      const cpuBefore = cpuSeconds(serve.pid);
      const downAt = Date.now();
      cluster().stopServer();
      try {
        writeFileSync(join(dir, `gate-${onHost}`), "");
        await host.log.waitFor(/result of work \S+ kept in the outbox until the journal takes it/, 60_000);
        await err.waitFor(/the journal's Postgres at \S+ is unreachable .*; retrying for up to \d+ s more/, 60_000);
        // The outage's length is what the case is about (not a pace): the server comes back when it is up.
        const left = downAt + lastsMs - Date.now();
        if (left > 0) await Bun.sleep(left);
      } finally {
        endOutage(cluster());
      }
      const outageCpu = cpuSeconds(serve.pid) - cpuBefore;
      const outageSeconds = (Date.now() - downAt) / 1000;
      await err.waitFor(/the journal's Postgres at \S+ is reachable again/, 120_000);
      await host.log.waitFor(/committed the result of work \S+ from the outbox/, 120_000);
      for (const stage of ["s0", "s1"]) writeFileSync(join(dir, `gate-${stage}`), "");
      await waitUntil(() => events("drive_ended").some((e) => e.runId === id), 120_000, "the service's drive to end").catch((e: Error) => {
        throw new Error(`${e.message}\nservice:\n${said.text().slice(-4000)}\n${err.text().slice(-4000)}\nhost:\n${host.log.text().slice(-4000)}`);
      });
      // Backed off, never spun.
      expect(outageCpu / outageSeconds).toBeLessThan(MAX_CPU_SHARE);
      const show = JSON.parse((await runAtomic(["show", id, "--json"], { home, env })).stdout) as { run: { status: string; outputs: unknown }; steps: { name: string; kind: string; status: string }[] };
      expect(show.run.status).toBe("completed");
      expect(show.run.outputs).toEqual(["out-s0", "out-s1"]);
      expect(show.steps.filter((x) => x.kind === "stage").map((x) => [x.name, x.status]).sort()).toEqual([["s0", "completed"], ["s1", "completed"]]);
      expect(started().sort()).toEqual(["s0", "s1"]);
      expect([...counts(marks(join(dir, "marks")).map((l) => l.split(" ")[0]!)).entries()].sort()).toEqual([["s0", 1], ["s1", 1]]);
      // One drive rode the outage out: nothing was left for a person, nothing driven twice.
      expect(events("drive_started").filter((e) => e.runId === id).length).toBe(1);
      expect(events("run_left")).toEqual([]);
      expect(host.processes()).toContain(host.proc.pid);
      const password = decodeURIComponent(new URL(url).password);
      expect(`${said.text()}\n${err.text()}\n${host.log.text()}`).not.toContain(password);
    } finally {
      serve.kill("SIGTERM");
    }
    expect(await serve.exited).toBe(0);
  }, 300_000);
}

/** CPU seconds (user and system) a process has used so far. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** Which of the running stages runs on the host: the one whose shell carries the host's worker id. */
function hostStage(pids: number[], running: string[]): string {
  for (const pid of pids) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      const stage = running.find((s) => cmd.includes(`/gate-${s} `));
      if (stage) return stage;
    } catch {
      // gone meanwhile
    }
  }
  throw new Error(`no stage of ${running.join(", ")} runs on the host`);
}
