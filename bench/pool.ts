/**
 * The worker pool (issue 3, "Speed"), through the real binary: dist/atomic
 * run with its coordinator and 4 workers, each figure against a baseline
 * measured in the same run.
 *
 * 1. Makespan: 500 trivial shell stages (`true`) under one ctx.parallel on
 *    4 workers, from the run's first stage start (its `step_started` event
 *    in `--json` output) to the run's end (`run_ended`), both stamped by the
 *    root. Baseline, alternating: a fresh Bun process spawning the same 500
 *    commands itself, 4 at a time (`/bin/sh -c true` through Bun.spawn, its
 *    own process group, stdin, stdout and stderr piped and read to the end,
 *    the way the shell runner did until it gave stages their output files
 *    directly), timed inside that process from the first spawn to the last
 *    exit. The baseline was kept as it was when the runner changed.
 *    For information only: the 1.5x target was withdrawn (issue 25; real
 *    stages are agent calls of seconds, measured by bench/agent-stages.ts
 *    and bench/shell-fanout.ts). For scale,
 *    also the worker structure without any pool: 4 Bun processes spawning
 *    125 each, one at a time, and each pool process's CPU time per stage
 *    (on a 2-CPU machine both sides are CPU-bound, so the makespan ratio
 *    follows the CPU ratio).
 * 2. Claim-to-start on an idle pool: stages one after another (so every
 *    worker is idle when the next one comes), with ATOMIC_POOL_TRACE=1; from
 *    the coordinator's claim (just before its claim transaction) to the
 *    worker handing the start message to its runner (the start is sent
 *    once the claim transaction has committed), from the trace lines in
 *    the coordinator's and workers' logs (src/pool/trace.ts). Baseline: the
 *    round trip of a small JSON message to a Bun child over IPC
 *    (serialization "json", the child echoes it), with both sides idle
 *    before each one as long as the pool was idle before each claim (waking
 *    an idle process is most of an idle pool's latency on these VMs; the
 *    back-to-back round trip is shown too). Target: median at most 5x.
 * 3. Recovery: a stage's worker is SIGKILLed mid-stage (work lease 2 s); from
 *    the kill to the stage's process running again on another worker (that
 *    worker's `spawned` trace line). With 4 workers (an idle one takes it)
 *    and with 1 (a replacement worker has to start). Target: at most the
 *    lease plus 1 s, reported as a ratio to the lease (<= 1.5).
 * 4. Memory: the coordinator and its 4 workers, all idle (the run waits in
 *    a ctx.tool step of the root after 8 stages), VmRSS summed from /proc.
 *    Target: under 400 MB. The root's RSS is shown for scale.
 *
 * Each run gets its own ATOMIC_HOME with admission pacing off
 * (config.json: admission.maxLoadPerCpu very high): on a loaded machine the
 * host-pressure pacing (one stage start per second) would measure the
 * machine's load, not the pool. The home is in /dev/shm (memory) where
 * there is one: every stage creates its artifact directories and files and
 * the root fsyncs its checkpoints, and on the shared build VMs creating a
 * directory on the disk has cost anywhere from 0.05 to 1.3 ms of CPU
 * depending on what else runs, which would measure the disk, not the pool.
 * The makespan is also measured with the home on disk, for information.
 */

import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import {
  BUN,
  TMPFS,
  WORKFLOWS,
  atomicBin,
  binaryEnv,
  fmt,
  median,
  removeTempDir,
  runTimed,
  settle,
  spawnTracked,
  spread,
  tempDir,
  type Bench,
  type Result,
  crashOnceStage,
  now,
  waitFor,
} from "./lib.ts";

const WF = join(WORKFLOWS, "pool.ts");
const WORKERS = 4;

const STAGES = 500;
/** Pairs of runs (direct spawning, then the pool); the figure is information only. */
const MAKESPAN_REPS = 5;
/** Runs of the home-on-disk variant (information only). */
const DISK_REPS = 5;

const LATENCY_STAGES = 41;
const IPC_ROUND_TRIPS = 400;
const IPC_IDLE_ROUND_TRIPS = 100;
const LATENCY_TARGET = 5;

const LEASE_MS = 2_000;
const RECOVERY_REPS = 3;
const RECOVERY_SLACK_MS = 1_000;

const IDLE_RSS_TARGET_MB = 400;

// ---------------------------------------------------------------- helpers

/** A fresh home for one run, with admission pacing off (see the header); on disk (the temp dir) or in memory. */
function poolHome(where: "memory" | "disk" = "memory"): string {
  const home = tempDir("atomic-bench-pool-", where === "memory" && TMPFS ? TMPFS : undefined);
  writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { maxLoadPerCpu: 1_000_000 } }));
  return home;
}

type Event = Record<string, unknown> & { type: string; at?: number };

function events(stdout: string): Event[] {
  const out: Event[] = [];
  for (const line of stdout.split("\n")) {
    if (!line.startsWith("{")) continue;
    try {
      out.push(JSON.parse(line) as Event);
    } catch {
      // not an event line
    }
  }
  return out;
}

function rootRunId(evs: Event[]): string {
  const started = evs.find((e) => e.type === "run_started" && e.parentId === null);
  if (!started) throw new Error("no run_started event in the run's --json output");
  return started.runId as string;
}

interface TraceLine {
  event: string;
  workId: string;
  at: number;
  /** The log file (coordinator.log, w1-123.log, ...). */
  file: string;
}

/** The pool-trace lines of every log in a run's worker-logs directory. */
function traces(home: string, runId: string): TraceLine[] {
  const dir = join(home, "artifacts", runId, "worker-logs");
  const out: TraceLine[] = [];
  for (const file of readdirSync(dir)) {
    for (const line of readFileSync(join(dir, file), "utf8").split("\n")) {
      const m = /^pool-trace (\S+) (\S+) (\S+)$/.exec(line);
      if (m) out.push({ event: m[1]!, workId: m[2]!, at: Number(m[3]), file });
    }
  }
  return out;
}

function args(inputs: Record<string, string | number>, workers: number, extra: string[] = []): string[] {
  const list = Object.entries(inputs).flatMap(([k, v]) => ["--input", `${k}=${v}`]);
  return ["--json", "run", WF, ...list, "--workers", String(workers), ...extra];
}

function p90(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.9))]!;
}



// ---------------------------------------------------------------- 1. makespan

/**
 * The baseline: one Bun process spawning the commands itself, `concurrency`
 * at a time (Bun.spawn, its own process group, piped stdio read to the end;
 * see the header).
 */
const DIRECT = `
const n = Number(process.env.BENCH_N), concurrency = Number(process.env.BENCH_C);
const one = async () => {
  const child = Bun.spawn(["/bin/sh", "-c", "true"], { env: { ...process.env }, detached: true, stdin: "pipe", stdout: "pipe", stderr: "pipe" });
  await Promise.all([child.exited, new Response(child.stdout).arrayBuffer(), new Response(child.stderr).arrayBuffer()]);
  try { child.stdin.end(); } catch {}
};
let next = 0;
const cpu0 = process.cpuUsage();
const t0 = performance.now();
await Promise.all(Array.from({ length: concurrency }, async () => { while (next++ < n) await one(); }));
const ms = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);
process.stdout.write(JSON.stringify({ ms, cpuMs: (cpu.user + cpu.system) / 1000 }));
`;

interface DirectRun {
  ms: number;
  /** CPU time of the spawning process itself (not of its shells). */
  cpuMs: number;
}

async function direct(n: number, concurrency: number): Promise<DirectRun> {
  const env = { ...(process.env as Record<string, string>), BENCH_N: String(n), BENCH_C: String(concurrency) };
  const r = await runTimed([BUN, "-e", DIRECT], { env, capture: true });
  let out: DirectRun | undefined;
  try {
    out = JSON.parse(r.stdout) as DirectRun;
  } catch {
    out = undefined;
  }
  if (r.code !== 0 || !out) throw new Error(`the direct-spawn baseline failed (exit ${r.code}): ${r.stderr.slice(-500)}`);
  return out;
}

/** The worker structure without the pool: `processes` Bun processes, each spawning its share one at a time; spawn of the first to exit of the last. */
async function split(n: number, processes: number): Promise<number> {
  const env = { ...(process.env as Record<string, string>), BENCH_N: String(n / processes), BENCH_C: "1" };
  const t0 = performance.now();
  const runs = await Promise.all(Array.from({ length: processes }, () => runTimed([BUN, "-e", DIRECT], { env, capture: true })));
  const ms = performance.now() - t0;
  const failed = runs.find((r) => r.code !== 0);
  if (failed) throw new Error(`a split-spawning process failed (exit ${failed.code}): ${failed.stderr.slice(-500)}`);
  return ms;
}

interface PoolRun {
  makespan: number;
  /** Spawn of `atomic run` to its exit. */
  wall: number;
}

async function poolMakespan(bin: string, n: number, where: "memory" | "disk" = "memory"): Promise<PoolRun> {
  const home = poolHome(where);
  try {
    const r = await runTimed([bin, ...args({ n }, WORKERS)], { env: binaryEnv(home), capture: true, timeoutMs: 120_000 });
    const evs = events(r.stdout);
    if (r.code !== 0) throw new Error(`atomic run of ${n} stages exited ${r.code}: ${r.stderr.slice(-800)}`);
    const root = rootRunId(evs);
    const starts = evs.filter((e) => e.type === "step_started" && e.kind === "stage").map((e) => e.at!);
    const ended = evs.find((e) => e.type === "run_ended" && e.runId === root);
    const done = evs.filter((e) => e.type === "step_ended" && e.kind === "stage" && e.status === "completed").length;
    if (starts.length !== n || done !== n || !ended) throw new Error(`expected ${n} completed stages and a run_ended event; got ${starts.length} started, ${done} completed`);
    return { makespan: ended.at! - Math.min(...starts), wall: r.ms };
  } finally {
    removeTempDir(home);
  }
}

async function makespan(bin: string): Promise<Result[]> {
  // Warm-up: page cache for the binary, bun and /bin/sh.
  await poolMakespan(bin, 20);
  await direct(20, WORKERS);
  const base: DirectRun[] = [];
  const pool: PoolRun[] = [];
  const disk: PoolRun[] = [];
  const apart: number[] = [];
  for (let i = 0; i < MAKESPAN_REPS; i++) {
    settle();
    base.push(await direct(STAGES, WORKERS));
    settle();
    apart.push(await split(STAGES, WORKERS));
    settle();
    pool.push(await poolMakespan(bin, STAGES));
    if (TMPFS && i < DISK_REPS) {
      settle();
      disk.push(await poolMakespan(bin, STAGES, "disk"));
    }
  }
  const ms = median(pool.map((p) => p.makespan));
  const baseMs = median(base.map((b) => b.ms));
  const ratio = ms / baseMs;
  const cpu = await poolCpu(bin, STAGES);
  const perStage = (total: number) => fmt(total / STAGES, 2);
  const results: Result[] = [
    {
      bench: "pool",
      label: `pool makespan (information; target withdrawn), ${STAGES} \`true\` stages on ${WORKERS} workers (first stage start to run end, --json events${TMPFS ? "; ATOMIC_HOME in /dev/shm" : ""})`,
      value: ms,
      unit: "ms",
      baseline: { label: `one Bun process spawning /bin/sh -c true ${STAGES} times, ${WORKERS} at a time (piped stdio read to the end)`, value: baseMs, unit: "ms" },
      ratio: { value: ratio, meaning: "pool makespan ÷ direct spawning" },
      notes: [
        `pool makespan: ${spread(pool.map((p) => p.makespan))}; whole \`atomic run\` process: ${spread(pool.map((p) => p.wall))}`,
        `direct spawning: ${spread(base.map((b) => b.ms))}`,
        `the worker structure without the pool (${WORKERS} Bun processes spawning ${STAGES / WORKERS} each, one at a time; first spawn to last exit): ${spread(apart)}, ` +
          `so the pool makespan is ${fmt(ms / median(apart), 2)}x that`,
        "the pool starts with the first stage; the makespan counts from the first stage's start",
        `CPU per stage, one more run of ${STAGES} read from /proc (each process's own, its shells not counted): ` +
          `root ${perStage(cpu.root)} ms, coordinator ${perStage(cpu.coordinator)} ms, ${WORKERS} workers ${perStage(cpu.workers)} ms, ` +
          `total ${perStage(cpu.root + cpu.coordinator + cpu.workers)} ms; the direct-spawning process: ${perStage(median(base.map((b) => b.cpuMs)))} ms ` +
          `(${availableParallelism()} CPUs: when both sides are CPU-bound the makespan ratio follows the CPU ratio)`,
      ],
    },
  ];
  if (TMPFS) {
    const diskMs = median(disk.map((p) => p.makespan));
    results.push({
      bench: "pool",
      label: `pool makespan as above, ATOMIC_HOME on disk (${tmpdir()})`,
      value: diskMs,
      unit: "ms",
      baseline: { label: "direct spawning (as above)", value: baseMs, unit: "ms" },
      ratio: { value: diskMs / baseMs, meaning: "pool makespan (home on disk) ÷ direct spawning" },
      notes: [
        `pool makespan, home on disk: ${spread(disk.map((p) => p.makespan))}`,
        `creating 2 directories and 2 files (one stage's artifacts), now: ${fmt(artifactCostMs(tmpdir()), 3)} ms on disk, ${fmt(artifactCostMs(TMPFS), 3)} ms in /dev/shm`,
        "information only: each stage creates 2 directories and 2 files (its artifacts) and the journal fsyncs; that cost is the disk's, not the pool's",
      ],
    });
  }
  return results;
}

/** CPU milliseconds a process has used so far (utime + stime from /proc, in clock ticks of 10 ms). */
function cpuMsOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return NaN;
  }
}

/** One more pool run of `n` stages that waits at a gate at the end: each pool process's CPU time, read while it waits. */
async function poolCpu(bin: string, n: number): Promise<{ root: number; coordinator: number; workers: number }> {
  const home = poolHome();
  const d = tempDir("atomic-bench-pool-marks-");
  const gate = join(d, "gate");
  try {
    const proc = spawnTracked([bin, ...args({ n, gate }, WORKERS)], { env: binaryEnv(home), stdout: "ignore", stderr: "pipe" });
    const stderr = new Response(proc.stderr as ReadableStream).text();
    await waitFor("the run to reach its gate", () => (existsSync(`${gate}.waiting`) ? true : undefined), 120_000);
    const coordinator = childrenWith(proc.pid, "--internal-pool-coordinator")[0];
    if (coordinator === undefined) throw new Error("no coordinator under the root");
    const workers = childrenWith(coordinator, "--internal-workflow-worker");
    const cpu = { root: cpuMsOf(proc.pid), coordinator: cpuMsOf(coordinator), workers: workers.reduce((sum, w) => sum + cpuMsOf(w), 0) };
    writeFileSync(gate, "");
    const code = await proc.exited;
    if (code !== 0) throw new Error(`the gated run exited ${code}: ${(await stderr).slice(-800)}`);
    return cpu;
  } finally {
    removeTempDir(d);
    removeTempDir(home);
  }
}

/** What one stage's artifacts cost to create in `dir` (2 nested directories, 2 files), median of 50, in ms. */
function artifactCostMs(dir: string | undefined): number {
  if (!dir) return NaN;
  const base = tempDir("atomic-bench-pool-fs-", dir);
  try {
    const samples: number[] = [];
    for (let i = 0; i < 50; i++) {
      const t0 = performance.now();
      const stage = join(base, `0.${i}.0-s${i}`, "attempt-1");
      mkdirSync(stage, { recursive: true });
      closeSync(openSync(join(stage, "stdout.log"), "w"));
      closeSync(openSync(join(stage, "stderr.log"), "w"));
      samples.push(performance.now() - t0);
    }
    return median(samples);
  } finally {
    removeTempDir(base);
  }
}

// ---------------------------------------------------------------- 2. claim-to-start

const ECHO = `process.on("message", (m) => process.send(m));`;

/**
 * Round trips of a small JSON message to a Bun child over IPC (it echoes),
 * each timed; returns the samples in ms. With `idleMs`, both sides sleep
 * that long before each one, so the child is as idle as a pool's worker
 * between stages: on these VMs waking an idle process costs far more than
 * the message itself (about 20 us back to back, 90-130 us after 5-20 ms idle).
 */
async function ipcRoundTrips(n: number, idleMs = 0): Promise<number[]> {
  let answer: (() => void) | undefined;
  const child = Bun.spawn([BUN, "-e", ECHO], {
    stdin: "ignore",
    stdout: "ignore",
    stderr: "inherit",
    serialization: "json",
    ipc: () => answer?.(),
  });
  try {
    const roundTrip = async (nonce: number) => {
      const back = new Promise<void>((resolve) => (answer = resolve));
      const t0 = performance.now();
      child.send({ type: "ping", nonce });
      await back;
      return performance.now() - t0;
    };
    for (let i = 0; i < 50; i++) await roundTrip(i); // warm-up (also waits for the child to start)
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      if (idleMs > 0) await Bun.sleep(idleMs);
      out.push(await roundTrip(i));
    }
    return out;
  } finally {
    child.kill("SIGKILL");
    await child.exited;
  }
}

async function claimToStart(bin: string): Promise<Result> {
  const home = poolHome();
  let latency: number[];
  let decide: number[];
  let handOff: number[];
  let idle: number[];
  try {
    settle();
    const r = await runTimed([bin, ...args({ n: LATENCY_STAGES, mode: "sequential" }, WORKERS)], {
      env: binaryEnv(home, { ATOMIC_POOL_TRACE: "1" }),
      capture: true,
      timeoutMs: 120_000,
    });
    if (r.code !== 0) throw new Error(`atomic run (sequential stages) exited ${r.code}: ${r.stderr.slice(-800)}`);
    const lines = traces(home, rootRunId(events(r.stdout)));
    const at = (event: string) => new Map(lines.filter((l) => l.event === event).map((l) => [l.workId, l.at]));
    const claims = at("claim");
    const claimed = at("claimed");
    const starts = at("start");
    const exits = at("exited");
    // The first stage waits for the pool to start: not an idle pool yet.
    const ids = [...claims.keys()].filter((id) => starts.has(id)).sort((a, b) => claims.get(a)! - claims.get(b)!).slice(1);
    if (ids.length < LATENCY_STAGES - 1) throw new Error(`trace lines for ${ids.length} stages, expected ${LATENCY_STAGES - 1}`);
    latency = ids.map((id) => starts.get(id)! - claims.get(id)!);
    decide = ids.filter((id) => claimed.has(id)).map((id) => claimed.get(id)! - claims.get(id)!);
    handOff = ids.filter((id) => claimed.has(id)).map((id) => starts.get(id)! - claimed.get(id)!);
    // How long the pool sat idle before each claim: from the previous stage's end to this claim.
    const sorted = [...claims.keys()].filter((id) => exits.has(id)).sort((a, b) => claims.get(a)! - claims.get(b)!);
    idle = sorted.slice(1).map((id, i) => claims.get(id)! - exits.get(sorted[i]!)!);
  } finally {
    removeTempDir(home);
  }
  const idleMs = Math.max(1, Math.round(median(idle)));
  const rt = await ipcRoundTrips(IPC_IDLE_ROUND_TRIPS, idleMs);
  const hot = await ipcRoundTrips(IPC_ROUND_TRIPS);
  const ms = median(latency);
  const rtMs = median(rt);
  const ratio = ms / rtMs;
  return {
    bench: "pool",
    label: "claim-to-start on an idle pool (from before the coordinator's claim transaction to the worker starting the stage, ATOMIC_POOL_TRACE)",
    value: ms,
    unit: "ms",
    baseline: { label: `IPC round trip to a Bun child (serialization json, echo), both idle ${idleMs} ms before each, as the pool was`, value: rtMs, unit: "ms" },
    ratio: { value: ratio, meaning: "median claim-to-start ÷ median IPC round trip (equally idle)" },
    target: { text: `ratio <= ${LATENCY_TARGET}`, ok: ratio <= LATENCY_TARGET },
    notes: [
      `claim-to-start: ${spread(latency)}, p90 ${fmt(p90(latency))} ms (${LATENCY_STAGES} stages in sequence, the first left out; the pool idle ${spread(idle)} before each)`,
      `of which the claim transaction up to its commit: median ${fmt(median(decide), 3)} ms; from there to the worker's runner (the start message): median ${fmt(median(handOff), 3)} ms`,
      `IPC round trip after ${idleMs} ms idle: ${spread(rt, "ms")}; back to back: ${spread(hot, "ms")} ` +
        `(claim-to-start ÷ back-to-back round trip: ${fmt(ms / median(hot), 1)}; the part from the lease decided: ${fmt(median(handOff) / median(hot), 1)})`,
    ],
  };
}

// ---------------------------------------------------------------- 3. recovery

interface Recovery {
  ms: number;
  /** The killed worker's log and the log of the worker that ran the stage again. */
  from: string;
  to: string;
}

async function recoverOnce(bin: string, workers: number): Promise<Recovery> {
  const home = poolHome();
  const d = tempDir("atomic-bench-pool-marks-");
  try {
    const stage = crashOnceStage(d);
    const command = stage.command;
    const proc = spawnTracked([bin, ...args({ n: 1, mode: "sequential", command }, workers, ["--work-lease-ms", String(LEASE_MS)])], {
      env: binaryEnv(home, { ATOMIC_POOL_TRACE: "1" }),
      stdout: "pipe",
      stderr: "pipe",
    });
    const stdout = new Response(proc.stdout as ReadableStream).text();
    const stderr = new Response(proc.stderr as ReadableStream).text();
    const worker = await stage.workerPid();
    await Bun.sleep(200); // mid-stage: its `started` message has reached the coordinator
    const killedAt = now();
    process.kill(worker, "SIGKILL");
    const timer = setTimeout(() => proc.kill("SIGKILL"), 60_000);
    const code = await proc.exited;
    clearTimeout(timer);
    if (code !== 0) throw new Error(`the run did not recover from the worker's SIGKILL (exit ${code}): ${(await stderr).slice(-800)}`);
    const lines = traces(home, rootRunId(events(await stdout)));
    const first = lines.find((l) => l.event === "spawned" && l.at < killedAt);
    const again = lines.filter((l) => l.event === "spawned" && l.at > killedAt && l.workId === first?.workId).sort((a, b) => a.at - b.at)[0];
    if (!first || !again) throw new Error("no trace of the stage running again after the kill");
    if (again.file === first.file) throw new Error(`the stage ran again on the killed worker's log ${again.file}`);
    return { ms: again.at - killedAt, from: first.file, to: again.file };
  } finally {
    removeTempDir(d);
    removeTempDir(home);
  }
}

async function recovery(bin: string, workers: number): Promise<Result> {
  const samples: Recovery[] = [];
  for (let i = 0; i < RECOVERY_REPS; i++) {
    settle();
    samples.push(await recoverOnce(bin, workers));
  }
  const ms = median(samples.map((s) => s.ms));
  const ratio = ms / LEASE_MS;
  const limit = (LEASE_MS + RECOVERY_SLACK_MS) / LEASE_MS;
  return {
    bench: "pool",
    label: `recovery, SIGKILL of a worker mid-stage to the stage running again (${workers} worker${workers > 1 ? "s" : ""}, lease ${fmt(LEASE_MS, 0)} ms)`,
    value: ms,
    unit: "ms",
    baseline: { label: "the work lease", value: LEASE_MS, unit: "ms" },
    ratio: { value: ratio, meaning: "recovery time ÷ lease" },
    target: { text: `ratio <= ${fmt(limit, 1)} (lease + ${fmt(RECOVERY_SLACK_MS, 0)} ms)`, ok: ms <= LEASE_MS + RECOVERY_SLACK_MS },
    notes: [
      `recovery: ${spread(samples.map((s) => s.ms))}`,
      `worker logs: ${samples.map((s) => `${s.from} -> ${s.to}`).join(", ")}`,
      workers > 1 ? "an idle worker takes the released stage" : "the replacement worker has to start before it can take the stage",
    ],
  };
}

// ---------------------------------------------------------------- 4. memory

function status(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return undefined;
  }
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(status(pid) ?? "");
  return m ? Number(m[1]) / 1024 : 0;
}

function pssMb(pid: number): number {
  try {
    const m = /Pss:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"));
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

/** Children of `pid` whose command line contains `role`. */
function childrenWith(pid: number, role: string): number[] {
  const out: number[] = [];
  for (const entry of readdirSync("/proc")) {
    const child = Number(entry);
    if (!Number.isInteger(child)) continue;
    const ppid = /PPid:\s+(\d+)/.exec(status(child) ?? "")?.[1];
    if (Number(ppid) !== pid) continue;
    try {
      if (readFileSync(`/proc/${child}/cmdline`, "utf8").includes(role)) out.push(child);
    } catch {
      // gone
    }
  }
  return out;
}

async function memory(bin: string): Promise<Result> {
  const home = poolHome();
  const d = tempDir("atomic-bench-pool-marks-");
  const gate = join(d, "gate");
  try {
    const proc = spawnTracked([bin, ...args({ n: 8, gate }, WORKERS)], { env: binaryEnv(home), stdout: "ignore", stderr: "pipe" });
    const stderr = new Response(proc.stderr as ReadableStream).text();
    await waitFor("the run to reach its gate", () => (existsSync(`${gate}.waiting`) ? true : undefined), 60_000);
    await Bun.sleep(500); // idle for a moment: workers settled after their stages
    const coordinators = childrenWith(proc.pid, "--internal-pool-coordinator");
    if (coordinators.length !== 1) throw new Error(`expected one coordinator under the root, found ${coordinators.length}`);
    const coordinator = coordinators[0]!;
    const workers = childrenWith(coordinator, "--internal-workflow-worker");
    if (workers.length !== WORKERS) throw new Error(`expected ${WORKERS} workers under the coordinator, found ${workers.length}`);
    const samples: number[] = [];
    const pss: number[] = [];
    const roots: number[] = [];
    for (let i = 0; i < 3; i++) {
      const pids = [coordinator, ...workers];
      samples.push(pids.reduce((sum, p) => sum + rssMb(p), 0));
      pss.push(pids.reduce((sum, p) => sum + pssMb(p), 0));
      roots.push(rssMb(proc.pid));
      await Bun.sleep(200);
    }
    const perProcess = [coordinator, ...workers].map((p) => fmt(rssMb(p), 0)).join(" + ");
    writeFileSync(gate, "");
    const timer = setTimeout(() => proc.kill("SIGKILL"), 30_000);
    const code = await proc.exited;
    clearTimeout(timer);
    if (code !== 0) throw new Error(`the gated run exited ${code}: ${(await stderr).slice(-800)}`);
    const total = median(samples);
    return {
      bench: "pool",
      label: `idle pool memory: coordinator + ${WORKERS} idle workers, VmRSS summed`,
      value: total,
      unit: "MB",
      baseline: { label: "budget", value: IDLE_RSS_TARGET_MB, unit: "MB" },
      ratio: { value: total / IDLE_RSS_TARGET_MB, meaning: "pool RSS ÷ budget" },
      target: { text: `ratio < 1 (under ${IDLE_RSS_TARGET_MB} MB)`, ok: total < IDLE_RSS_TARGET_MB },
      notes: [
        `per process (coordinator + workers): ${perProcess} MB`,
        `PSS summed (shared pages counted once): ${fmt(median(pss))} MB; the root's own RSS: ${fmt(median(roots))} MB`,
      ],
    };
  } finally {
    removeTempDir(d);
    removeTempDir(home);
  }
}

// ---------------------------------------------------------------- the benchmark

const bench: Bench = {
  name: "pool",
  title: `worker pool: ${STAGES} shell stages on ${WORKERS} workers vs direct spawning, claim-to-start, recovery, idle memory`,
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    return [...(await makespan(bin)), await claimToStart(bin), await recovery(bin, WORKERS), await recovery(bin, 1), await memory(bin)];
  },
};

export default bench;
