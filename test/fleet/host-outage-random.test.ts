/**
 * Postgres outages of 25-80 s at random points of a run whose stages all
 * run on a worker host (`atomic worker`, the real binary; the root `atomic
 * run --workers 0`), on a cluster of this file's own (`pg_ctl stop -m
 * immediate`, started again on the same port when the outage's length is
 * up). The workflow is the one-host outage tests' (tools on the root and
 * two parallel shell stages on the host per round,
 * test/recovery/fixtures/pg-outage.ts). Each case draws, from one seed,
 * after how many of its side effects the server stops and for how long;
 * `FC_SEED=<seed>` (in the test names, so a failure prints it) replays the
 * same points.
 *
 * Both sides are set to ride the outage out, as a fleet that must not lose
 * a run to a database restart would be: the root's retry window (120 s)
 * and run lease (150 s: it stops itself a fifth before, at 120 s) and the
 * host's work lease (150 s) outlast the longest outage; the host keeps its
 * default window (15 s), so a result that ends during the outage waits in
 * its outbox. So nothing is lost and nothing runs twice: the run completes
 * (exit 0, its total), every shell stage and tool step's side effect
 * happened exactly once, every stage is recorded once as completed, the
 * host process is the one started first, and the journal's password is
 * printed nowhere. Where a lease is shorter than the outage the work runs
 * again instead (host-outage-points.test.ts, "longer than the work lease";
 * docs/guides/postgres-and-worker-hosts.md). Durations are never asserted.
 * The cases run at once, each on a cluster and with a host of its own
 * (outage-cases.ts): their outages overlap.
 */

import { expect } from "bun:test";
import fc from "fast-check";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { createDatabase } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { concurrentTest } from "../helpers/concurrent.ts";
import { caseHostId, clusterPerCase, endOutage } from "./outage-cases.ts";
import { OUTAGE_SEED, RIDE_OUT, counts, startHost } from "./support.ts";

const WORKFLOW = join(import.meta.dir, "..", "recovery", "fixtures", "pg-outage.ts");
const ROUNDS = 8;
/** How long after the server is back a root that has not ended is taken for stuck (the run takes seconds). */
const STUCK_MS = 120_000;
const clusterOf = clusterPerCase(2);
const SEED = OUTAGE_SEED;
const PLANS = fc.sample(fc.noBias(fc.record({ after: fc.integer({ min: 1, max: ROUNDS * 3 - 6 }), lastsMs: fc.integer({ min: 25_000, max: 80_000 }) })), { seed: SEED, numRuns: 2 });

for (const [i, plan] of PLANS.entries()) {
  const cluster = () => clusterOf(i);
  const hostId = caseHostId(i);
  concurrentTest(`a worker host's postgres away for ${plan.lastsMs / 1000} s after ${plan.after} side effects (FC_SEED=${SEED}, case ${i + 1}): the run completes, every stage and side effect once`, async () => {
    const url = await createDatabase(cluster(), `hr_${Math.random().toString(36).slice(2, 8)}`);
    const dir = makeTempDir("atomic-host-random-");
    const out = join(dir, "out");
    mkdirSync(out);
    const effects = () => (existsSync(join(out, "effects.txt")) ? readFileSync(join(out, "effects.txt"), "utf8").split("\n").filter(Boolean) : []);
    const host = await startHost({ url, id: hostId, slots: 2, leaseMs: RIDE_OUT.leaseMs, env: { OUT_DIR: out } });
    const env = { ATOMIC_JOURNAL: url, ATOMIC_JOURNAL_RETRY_MS: String(RIDE_OUT.journalRetryMs), OUT_DIR: out, ROUNDS: String(ROUNDS) };
    const home = join(dir, "root");
    const run = spawnAtomic(["run", WORKFLOW, "--workers", "0", "--json", "--lease-ms", String(RIDE_OUT.leaseMs)], { home, env });
    const said = lineWatcher(run.stdout);
    const err = lineWatcher(run.stderr);
    await waitUntil(() => effects().length >= plan.after, 120_000, `${plan.after} side effects`);
    cluster().stopServer();
    let back = false;
    const comeBack = () => {
      if (back) return;
      back = true;
      endOutage(cluster());
    };
    // The outage's length is what the case is about: the server comes back when it is up (or at once should the root end first).
    const end = setTimeout(comeBack, plan.lastsMs);
    let code: number | undefined;
    try {
      // Bounded (not a pace): a root that never ends fails the case with what the root and the host said.
      code = await Promise.race([run.exited, Bun.sleep(plan.lastsMs + STUCK_MS).then(() => undefined)]);
    } finally {
      clearTimeout(end);
      comeBack();
    }
    if (code === undefined) {
      throw new Error(`the root had not ended ${STUCK_MS / 1000} s after the server was back\nroot:\n${err.text().slice(-6000)}\nhost:\n${host.log.text().slice(-6000)}\nside effects: ${effects().join(" ")}`);
    }
    await waitUntil(() => said.ended && err.ended, 10_000, "the root's output to end");
    expect(err.text()).not.toMatch(/storage_unavailable|lease_lost/);
    expect(code).toBe(0);
    const result = said.lines.map((l) => JSON.parse(l) as Record<string, any>).find((e) => e.type === "result")!;
    expect(result.outputs).toEqual({ total: (ROUNDS * (ROUNDS + 1)) / 2 });
    // Every shell stage (on the host) and tool step (on the root) had its side effect exactly once.
    const once = counts(effects());
    expect(once.size).toBe(ROUNDS * 3);
    expect([...once.entries()].filter(([, n]) => n !== 1)).toEqual([]);
    // Every stage recorded once, completed, on the host.
    const show = JSON.parse((await runAtomic(["show", result.runId, "--json"], { home, env: { ATOMIC_JOURNAL: url } })).stdout) as { steps: { name: string; kind: string; status: string; ranOn?: { host: string } }[] };
    const stages = show.steps.filter((x) => x.kind === "stage");
    expect(stages.length).toBe(ROUNDS * 2);
    expect(new Set(stages.map((x) => x.name)).size).toBe(ROUNDS * 2);
    expect(stages.filter((x) => x.status !== "completed" || x.ranOn?.host !== hostId)).toEqual([]);
    // The host rode the outage out (the process started first still runs) and the password appears nowhere.
    expect(host.processes()).toContain(host.proc.pid);
    const password = decodeURIComponent(new URL(url).password);
    expect(password.length).toBeGreaterThan(0);
    expect(`${said.text()}\n${err.text()}\n${host.log.text()}`).not.toContain(password);
  }, 300_000);
}
