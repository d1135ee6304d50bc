/**
 * Agent stages on the pool, shaped like real work (issue 25, benchmark a):
 * `dist/atomic run` of 200 openai agent stages under one ctx.parallel on 4
 * workers (bench/workflows/agents.ts), against the fake provider in a
 * process of its own answering like a model: each stage is a 2-turn agent
 * loop (a `list` tool call, then the answer), each reply streamed over 300
 * to 800 ms (bench/latency.ts: the same latencies in every run).
 *
 * - Makespan: the whole `atomic run` process, spawn to exit (start-up of
 *   the root, the pool and its workers included), against the ideal: the
 *   stages' own time (the sum of the provider's latencies, known in
 *   advance) over the concurrency (4). Target: at most 1.05x.
 * - CPU: root + coordinator + workers, from the rusage the root's wait
 *   returns (the root reaps the coordinator, the coordinator its workers),
 *   per stage, against the stage's own wall time (its latencies). Target:
 *   at most 2 %. The split by role (and the intercom broker, a detached
 *   process of its own, not in the rusage) is sampled from /proc every
 *   250 ms, for information.
 *
 * The home is on the disk (not /dev/shm): agent stages are long enough
 * that creating their artifact files is no figure of its own. Admission
 * pacing is off (config.json), or a loaded machine would pace stage starts.
 */

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { latencyMs } from "./latency.ts";
import { watchTree } from "./process-tree.ts";
import {
  WORKFLOWS,
  atomicBin,
  binaryEnv,
  fmt,
  loadAverage,
  readNdjson,
  removeTempDir,
  spawnTracked,
  startFakeProvider,
  tempDir,
  type Bench,
  type Result,
} from "./lib.ts";

const STAGES = 200;
const WORKERS = 4;
const TURNS = 2;
const MAKESPAN_TARGET = 1.05;
const CPU_TARGET = 0.02;

/** The stages' own time: every turn's latency, in ms. */
function stageTimeMs(): number {
  let sum = 0;
  for (let i = 0; i < STAGES; i++) for (let t = 0; t < TURNS; t++) sum += latencyMs(i, t);
  return sum;
}

async function run(): Promise<Result[]> {
  const bin = atomicBin();
  const server = await startFakeProvider({ FAKE_LATENCY_TURNS: String(TURNS) });
  const home = tempDir("atomic-bench-agent-stages-");
  try {
    writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { maxLoadPerCpu: 1_000_000 } }));
    const env = binaryEnv(home, { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-bench" });
    const load = loadAverage();
    const t0 = performance.now();
    const proc = spawnTracked([bin, "run", join(WORKFLOWS, "agents.ts"), "--input", `n=${STAGES}`, "--input", "prompt=latency:", "--workers", String(WORKERS), "--json"], {
      env,
      stdout: "pipe",
      stderr: "pipe",
    });
    const watch = watchTree(proc.pid, 250);
    const stamps = { started: NaN, ended: NaN, status: "" };
    const stderr = new Response(proc.stderr as ReadableStream).text();
    await readNdjson(proc.stdout as ReadableStream<Uint8Array>, (e) => {
      if (e.type === "run_started" && e.parentId === null) stamps.started = e.at as number;
      if (e.type === "run_ended" && Number.isNaN(stamps.ended)) {
        stamps.ended = e.at as number;
        stamps.status = String(e.status);
      }
    });
    const code = await proc.exited;
    const wall = performance.now() - t0;
    watch.stop();
    if (code !== 0 || stamps.status !== "completed") throw new Error(`atomic run exited ${code} (${stamps.status}): ${(await stderr).slice(-800)}`);
    const usage = proc.resourceUsage();
    if (!usage) throw new Error("no resource usage for the run's process");
    const cpuMs = Number(usage.cpuTime.user + usage.cpuTime.system) / 1000;
    const own = stageTimeMs();
    const ideal = own / WORKERS;
    const ratio = wall / ideal;
    const perStageCpu = cpuMs / STAGES;
    const perStageWall = own / STAGES;
    const cpuRatio = perStageCpu / perStageWall;
    const byRole = watch.cpuByRole();
    const loadAfter = loadAverage();
    return [
      {
        bench: "agent-stages",
        label: `makespan of ${STAGES} agent stages (${TURNS} turns of 300-800 ms each) on ${WORKERS} workers, whole \`atomic run\``,
        value: wall,
        unit: "ms",
        baseline: { label: `ideal: the stages' own time (${fmt(own / 1000, 1)} s of model latency) over ${WORKERS}`, value: ideal, unit: "ms" },
        ratio: { value: ratio, meaning: "makespan ÷ ideal" },
        target: { text: `ratio <= ${MAKESPAN_TARGET}`, ok: ratio <= MAKESPAN_TARGET },
        notes: [
          `run_started to run_ended (root's stamps): ${fmt(stamps.ended - stamps.started, 0)} ms; start-up before run_started and exit after run_ended: ${fmt(wall - (stamps.ended - stamps.started), 0)} ms`,
          `load average before ${load}, after ${loadAfter} (2 CPUs, shared)`,
        ],
      },
      {
        bench: "agent-stages",
        label: `CPU per agent stage: root + coordinator + workers (rusage of the run)`,
        value: perStageCpu,
        unit: "ms",
        baseline: { label: "the stage's own wall time (mean model latency per stage)", value: perStageWall, unit: "ms" },
        ratio: { value: cpuRatio, meaning: "CPU per stage ÷ stage wall time" },
        target: { text: `ratio <= ${CPU_TARGET}`, ok: cpuRatio <= CPU_TARGET },
        notes: [
          `total ${fmt(cpuMs, 0)} ms CPU for ${STAGES} stages; sampled from /proc by role: ` +
            `root ${fmt(byRole.root, 0)}, coordinator ${fmt(byRole.coordinator, 0)}, workers ${fmt(byRole.worker, 0)}, ` +
            `other children ${fmt(byRole.other, 0)} ms; intercom broker (detached, not in the rusage) ${fmt(byRole.broker, 0)} ms`,
        ],
      },
    ];
  } finally {
    server.stop();
    removeTempDir(home);
  }
}

const bench: Bench = {
  name: "agent-stages",
  title: `${STAGES} agent stages against a provider answering in 300-800 ms, on ${WORKERS} workers: makespan vs ideal, CPU per stage`,
  run,
};

export default bench;
