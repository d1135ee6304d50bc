/**
 * A large fan-out (issue 25, benchmark c): `dist/atomic run` of 10,000
 * shell stages `sleep 0.05` under one ctx.parallel (bench/workflows/pool.ts)
 * on 4 workers (the default on a machine of 4 CPUs; the pool, its workers
 * and the stages' processes take 15-17 ms of CPU per stage, so on 2 CPUs
 * 8 workers would be bound by the CPU, not by the stages).
 *
 * - Makespan: the whole `atomic run` process, spawn to exit, against the
 *   ideal: the stages' own time over the concurrency. A stage's own time is
 *   what its command takes when run directly: `/bin/sh -c "sleep 0.05"`
 *   spawned by this process one at a time (spawn to exit, so the cost of
 *   starting a process is in it), measured in the same run just before.
 *   Target: at most 1.2x.
 * - Memory: the private, anonymous memory (RssAnon: the heaps) of the root,
 *   the coordinator and the largest worker, sampled from /proc every
 *   second. Flat means it does not grow with the stages done: from the
 *   first sample after a fifth of the run to the largest sample after it,
 *   each process may grow at most 10 % (the 10,000 stages are all queued
 *   at the start, so their records are in memory from then on; what must
 *   not grow is what each finished stage leaves behind). The whole
 *   resident set (VmRSS) is shown too: it also counts the pages of the
 *   120 MB binary each process has run code from, shared by all of them,
 *   which grow as more of the code is used, not with the stages.
 *
 * The home is in /dev/shm where there is one (as in bench/pool.ts: 10,000
 * stages create 40,000 artifact files and directories, which on these
 * shared VMs' disk measures the disk; removing them took minutes), with
 * admission pacing off (config.json).
 */

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { watchTree, type Role, type TreeSample } from "./process-tree.ts";
import {
  TMPFS,
  WORKFLOWS,
  atomicBin,
  binaryEnv,
  fmt,
  loadAverage,
  median,
  removeTempDir,
  runTimed,
  spawnTracked,
  spread,
  tempDir,
  type Bench,
  type Result,
} from "./lib.ts";

const STAGES = 10_000;
const WORKERS = 4;
const COMMAND = "sleep 0.05";
const DIRECT_SAMPLES = 60;
const MAKESPAN_TARGET = 1.2;
const GROWTH_TARGET = 0.1;

/** The stage's own time: `/bin/sh -c COMMAND` spawned directly, one at a time; median ms. */
async function ownTime(): Promise<number[]> {
  const xs: number[] = [];
  for (let i = 0; i < DIRECT_SAMPLES; i++) {
    const r = await runTimed(["/bin/sh", "-c", COMMAND]);
    if (r.code !== 0) throw new Error(`/bin/sh -c "${COMMAND}" exited ${r.code}`);
    xs.push(r.ms);
  }
  return xs;
}

/** Growth of one role's resident set after the first fifth of the run: (largest later sample ÷ the first) - 1. */
function growth(samples: TreeSample[], role: Role, pick: (s: TreeSample) => number): { from: number; to: number; ratio: number } {
  const end = samples[samples.length - 1]!.at;
  const later = samples.filter((s) => s.at >= end / 5 && pick(s) > 0);
  const from = pick(later[0]!);
  const to = Math.max(...later.map(pick));
  return { from, to, ratio: to / from - 1 };
}

async function run(): Promise<Result[]> {
  const bin = atomicBin();
  const home = tempDir("atomic-bench-shell-fanout-", TMPFS);
  try {
    writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { maxLoadPerCpu: 1_000_000 } }));
    const load = loadAverage();
    const own = await ownTime();
    const ideal = (median(own) * STAGES) / WORKERS;
    const t0 = performance.now();
    const proc = spawnTracked([bin, "run", join(WORKFLOWS, "pool.ts"), "--input", `n=${STAGES}`, "--input", `command=${COMMAND}`, "--workers", String(WORKERS), "--quiet"], {
      env: binaryEnv(home),
      stdout: "ignore",
      stderr: "pipe",
    });
    const watch = watchTree(proc.pid, 1_000);
    const stderr = await new Response(proc.stderr as ReadableStream).text();
    const code = await proc.exited;
    const wall = performance.now() - t0;
    watch.stop();
    if (code !== 0) throw new Error(`atomic run exited ${code}: ${stderr.slice(-800)}`);
    const usage = proc.resourceUsage();
    const cpuMs = usage ? Number(usage.cpuTime.user + usage.cpuTime.system) / 1000 : NaN;
    const ratio = wall / ideal;
    const roles: [string, Role, (s: TreeSample) => number, (s: TreeSample) => number][] = [
      ["root", "root", (s) => s.anonMb.root, (s) => s.rssMb.root],
      ["coordinator", "coordinator", (s) => s.anonMb.coordinator, (s) => s.rssMb.coordinator],
      ["largest worker", "worker", (s) => s.maxAnonMb.worker, (s) => s.maxRssMb.worker],
    ];
    const grown = roles.map(([label, role, anon, rss]) => ({ label, ...growth(watch.samples, role, anon), rss: growth(watch.samples, role, rss) }));
    const worst = Math.max(...grown.map((g) => g.ratio));
    return [
      {
        bench: "shell-fanout",
        label: `makespan of ${fmt(STAGES, 0)} \`${COMMAND}\` shell stages on ${WORKERS} workers, whole \`atomic run\``,
        value: wall,
        unit: "ms",
        baseline: { label: `ideal: ${fmt(STAGES, 0)} x the stage's own time (\`/bin/sh -c "${COMMAND}"\` spawned directly, median ${fmt(median(own), 1)} ms) over ${WORKERS}`, value: ideal, unit: "ms" },
        ratio: { value: ratio, meaning: "makespan ÷ ideal" },
        target: { text: `ratio <= ${MAKESPAN_TARGET}`, ok: ratio <= MAKESPAN_TARGET },
        notes: [
          `the stage's own time: ${spread(own)}`,
          `CPU of the run (root, coordinator, workers and the stages' processes): ${fmt(cpuMs / 1000, 1)} s, ${fmt(cpuMs / STAGES, 2)} ms per stage`,
          `load average before ${load}, after ${loadAverage()} (2 CPUs, shared)`,
        ],
      },
      {
        bench: "shell-fanout",
        label: `memory over a ${fmt(STAGES, 0)}-stage fan-out: largest growth of a process's private memory (RssAnon) after the first fifth`,
        value: worst * 100,
        unit: "%",
        baseline: { label: "each process's private memory after the first fifth of the run", value: grown[0]!.from, unit: "MB (root)" },
        ratio: { value: worst, meaning: "largest later RssAnon ÷ RssAnon after a fifth, minus 1 (worst process)" },
        target: { text: `ratio <= ${GROWTH_TARGET}`, ok: worst <= GROWTH_TARGET },
        notes: grown.map(
          (g) =>
            `${g.label}: private ${fmt(g.from, 1)} MB after a fifth, at most ${fmt(g.to, 1)} MB later (${fmt(g.ratio * 100, 1)} %); ` +
            `whole RSS ${fmt(g.rss.from, 1)} -> ${fmt(g.rss.to, 1)} MB (${fmt(g.rss.ratio * 100, 1)} %)`,
        ),
      },
    ];
  } finally {
    removeTempDir(home);
  }
}

const bench: Bench = {
  name: "shell-fanout",
  title: `${fmt(STAGES, 0)} \`${COMMAND}\` shell stages on ${WORKERS} workers: makespan vs ideal, memory flat`,
  run,
};

export default bench;
