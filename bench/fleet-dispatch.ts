/**
 * Dispatch latency on an idle cluster (issue 16, "Speed"): 3 worker hosts
 * of 4 slots (bench/fleet.ts), started and idle; a root with `--workers 0`
 * runs 200 `true` stages one after another (bench/workflows/pool.ts,
 * mode sequential), so each stage is enqueued while every host is idle.
 *
 * Per stage, from the run's records in the journal: its `step_started`
 * record's time (the root's clock as the append that enqueues its work
 * item went out) to its checkpoint's `startedAt` (the host's worker's clock
 * as the stage's process was started; the hosts are on the same machine,
 * so the clocks are one). The first stage of a run is left out (the
 * root's first append and listen). p50 and p99 are reported; target: p50
 * at most 20 ms. Where the time goes, from the hosts' pool traces
 * (ATOMIC_POOL_TRACE): enqueue to the claim decided on a host (the
 * wake-up by NOTIFY and the claim transaction), then to the stage's
 * process started (the start message and the spawn).
 *
 * Baseline, in the same run on the same database with the hosts stopped:
 * the root's own pool (`--workers 1`) taking the same stages, measured the
 * same way. Two rounds, hosts then local pool each time; samples pooled.
 */

import { join } from "node:path";
import { atomicBin, binaryEnv, fmt, runTimed, settle, type Bench, type Result } from "./lib.ts";
import {
  benchHome,
  checkpoints,
  enqueuedAt,
  firstOf,
  failure,
  fleetDatabase,
  itemsPerHost,
  logTraces,
  percentile,
  readRun,
  rootRunId,
  runArgs,
  startHosts,
  stopHosts,
  type FleetDb,
  type Host,
  type TraceLine,
} from "./fleet.ts";

const HOSTS = 3;
const SLOTS = 4;
const STAGES = 200;
const ROUNDS = 2;
const TARGET_P50_MS = 20;

interface Latencies {
  /** Enqueue to the stage's process started, per stage (ms). */
  total: number[];
  /** Enqueue to the claim decided (pool trace `claimed`). */
  toClaimed: number[];
  /** Claim decided to the process started (pool trace `spawned`). */
  toSpawned: number[];
  /** The checkpoint's `startedAt` minus the trace's `spawned` (the same moment by two clocks of one machine: about 0). */
  skew: number[];
  /** Stages whose start the root did not hear before their result (their checkpoint has no start time of its own). */
  unheard: number;
  perHost: string;
}

/** One sequential run; `hosts` empty: the root's own pool (its traces are in the run's worker-logs). */
async function measure(bin: string, db: FleetDb, hosts: readonly Host[]): Promise<Latencies> {
  const home = benchHome("atomic-bench-fleet-root-");
  settle();
  const workers = hosts.length > 0 ? 0 : 1;
  const r = await runTimed(runArgs(bin, db.url, { n: STAGES, mode: "sequential" }, workers), {
    env: binaryEnv(home, { ATOMIC_POOL_TRACE: "1" }),
    capture: true,
    timeoutMs: 120_000,
  });
  if (r.code !== 0) throw new Error(`atomic run --workers ${workers} exited ${r.code ?? r.signal}: ${failure(r)}`);
  const runId = rootRunId(r.stdout);
  const { events, items } = await readRun(db.journal, runId);
  const perHost = itemsPerHost(items);
  if (hosts.length > 0 && perHost.has("root")) throw new Error("the root ran stages itself with --workers 0");
  if (hosts.length === 0 && [...perHost.keys()].some((h) => h !== "root")) throw new Error("a worker host ran stages of the local-pool run");
  const lines: TraceLine[] = hosts.length > 0 ? hosts.flatMap((h) => h.traces()) : logTraces(join(home, "artifacts", runId, "worker-logs"));
  const claimed = firstOf(lines, "claimed");
  const spawned = firstOf(lines, "spawned");
  const ends = checkpoints(events);
  const starts = [...enqueuedAt(events)].sort((a, b) => a[1].at - b[1].at).slice(1);
  if (starts.length !== STAGES - 1) throw new Error(`${starts.length + 1} stages enqueued, expected ${STAGES}`);
  const out: Latencies = { total: [], toClaimed: [], toSpawned: [], skew: [], unheard: 0, perHost: [...perHost].sort().map(([h, n]) => `${h} ${n}`).join(", ") };
  for (const [key, { at, workId, requestedAt }] of starts) {
    const end = ends.get(key);
    if (!end) throw new Error(`stage ${key} has no checkpoint`);
    const c = claimed.get(workId);
    const s = spawned.get(workId);
    if (c !== undefined) out.toClaimed.push(c - at);
    if (c !== undefined && s !== undefined) out.toSpawned.push(s - c);
    if (s !== undefined) out.skew.push(end.startedAt - s);
    // The root records when the stage started only if it heard the `started` event before the result; else
    // the checkpoint keeps the attempt's request time, which says nothing about dispatch.
    if (end.startedAt === requestedAt) out.unheard++;
    else out.total.push(end.startedAt - at);
  }
  return out;
}

function merge(xs: readonly Latencies[]): Latencies {
  return {
    total: xs.flatMap((x) => x.total),
    toClaimed: xs.flatMap((x) => x.toClaimed),
    toSpawned: xs.flatMap((x) => x.toSpawned),
    skew: xs.flatMap((x) => x.skew),
    unheard: xs.reduce((n, x) => n + x.unheard, 0),
    perHost: xs.map((x) => x.perHost).join(" | "),
  };
}

function pct(xs: readonly number[]): string {
  return `min ${fmt(Math.min(...xs), 1)} ms, p50 ${fmt(percentile(xs, 50), 1)}, p90 ${fmt(percentile(xs, 90), 1)}, p99 ${fmt(percentile(xs, 99), 1)}, max ${fmt(Math.max(...xs), 1)} (n=${xs.length})`;
}

const bench: Bench = {
  name: "fleet-dispatch",
  title: `dispatch latency on an idle cluster (${HOSTS} hosts x ${SLOTS} slots): stage enqueued to its process started on a host, vs the root's own pool`,
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    const db = await fleetDatabase();
    let hosts: Host[] = [];
    try {
      const remote: Latencies[] = [];
      const local: Latencies[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        hosts = await startHosts(bin, db.url, Array.from({ length: HOSTS }, (_, i) => `r${round}h${i + 1}`), { slots: SLOTS, trace: true });
        await Bun.sleep(1_000); // idle: their first heartbeats, polls and sweeps are behind them
        remote.push(await measure(bin, db, hosts));
        await stopHosts(hosts);
        hosts = [];
        local.push(await measure(bin, db, []));
      }
      const r = merge(remote);
      const l = merge(local);
      const p50 = percentile(r.total, 50);
      const base = percentile(l.total, 50);
      return [
        {
          bench: "fleet-dispatch",
          label: `dispatch latency p50, stage enqueued to its process started on a remote host (${HOSTS} idle hosts, root --workers 0)`,
          value: p50,
          unit: "ms",
          baseline: { label: "the same through the root's own pool (--workers 1, no hosts), same database", value: base, unit: "ms" },
          ratio: { value: p50 / base, meaning: "remote p50 ÷ local-pool p50 (information; the target is the absolute p50)" },
          target: { text: `p50 <= ${TARGET_P50_MS} ms`, ok: p50 <= TARGET_P50_MS },
          notes: [
            `remote: ${pct(r.total)}`,
            `  enqueue to claim decided on a host (NOTIFY wake-up + claim transaction): ${pct(r.toClaimed)}`,
            `  claim decided to process started (start message + spawn): ${pct(r.toSpawned)}`,
            `local pool: ${pct(l.total)}`,
            `  enqueue to claim decided: ${pct(l.toClaimed)}; claim to process started: ${pct(l.toSpawned)}`,
            `stages per host: ${r.perHost}`,
            `checks: the journal's start time minus the trace's spawn, remote ${pct(r.skew)}, local ${pct(l.skew)}; ` +
              `stages left out as the root heard their start only with their result: remote ${r.unheard}, local ${l.unheard}`,
          ],
        },
        {
          bench: "fleet-dispatch",
          label: "dispatch latency p99, remote host (information)",
          value: percentile(r.total, 99),
          unit: "ms",
          baseline: { label: "local pool p99", value: percentile(l.total, 99), unit: "ms" },
          ratio: { value: percentile(r.total, 99) / percentile(l.total, 99), meaning: "remote p99 ÷ local-pool p99" },
        },
      ];
    } finally {
      await stopHosts(hosts);
      await db.stop();
    }
  },
};

export default bench;
