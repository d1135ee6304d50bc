/**
 * What our processes cost while they wait (issue 25): CPU time and
 * wake-ups a second of each process kind with nothing to do, measured
 * from /proc over IDLE_S seconds, all at once:
 *
 * - a run's root, coordinator and worker while its one shell stage
 *   (`sleep`) runs and prints nothing (4 workers configured, one started);
 * - `atomic serve` (recovery and schedules on) on an empty home.
 *
 * CPU is utime + stime of /proc/PID/stat (10 ms ticks), wake-ups the
 * voluntary context switches of every thread of the process
 * (/proc/PID/task/TID/status): timers of ours, the allocator's and the
 * collector's threads that our wake-ups set going. Baseline, same run: a
 * bare `bun` waiting on a timer that never fires (what the runtime costs
 * before any timer of ours). For information: no target; the figures are
 * kept in bench/README.md and docs/design/processes.md.
 */

import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { descendants, roleOf } from "./process-tree.ts";
import { BUN, atomicBin, binaryEnv, fmt, loadAverage, readNdjson, removeTempDir, spawnTracked, tempDir, type Bench, type Result } from "./lib.ts";

const IDLE_S = 60;
const TICK_MS = 10;

function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

function wakeUps(pid: number): number {
  let n = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const status = readFileSync(`/proc/${pid}/task/${tid}/status`, "utf8");
    n += Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)?.[1] ?? 0);
  }
  return n;
}

async function run(): Promise<Result[]> {
  const bin = atomicBin();
  const runHome = tempDir("atomic-bench-idle-run-");
  const serveHome = tempDir("atomic-bench-idle-serve-");
  try {
    const workflow = join(runHome, "idle.ts");
    writeFileSync(
      workflow,
      `import { workflow } from "atomic";\nexport default workflow({ name: "idle", async run(ctx) { await ctx.parallel([{ name: "s", shell: "sleep ${IDLE_S + 60}" }]); return 1; } });\n`,
    );
    const root = spawnTracked([bin, "run", workflow, "--workers", "4", "--json"], { env: binaryEnv(runHome), stdout: "pipe" });
    const serve = spawnTracked([bin, "serve", "--port", "0", "--json"], { env: binaryEnv(serveHome), stdout: "pipe" });
    const bare = spawnTracked([BUN, "-e", "setTimeout(() => {}, 1e9)"], {});
    // The stage runs (its step_running is recorded), and the service said where it listens.
    const running = new Promise<void>((resolve) => void readNdjson(root.stdout as ReadableStream<Uint8Array>, (e) => e.type === "step_running" && resolve()));
    const serving = (serve.stdout as ReadableStream<Uint8Array>).getReader().read();
    await Promise.all([running, serving]);
    const pids = new Map<string, number>([
      ["bare bun (baseline)", bare.pid],
      ["root", root.pid],
      ["atomic serve", serve.pid],
    ]);
    for (const pid of descendants(root.pid)) {
      const role = roleOf(pid, root.pid);
      if (role === "coordinator" || role === "worker") pids.set(role, pid);
    }
    const before = new Map([...pids].map(([k, pid]) => [k, { cpu: cpuMs(pid), wakes: wakeUps(pid) }]));
    const load = loadAverage();
    await Bun.sleep(IDLE_S * 1000); // the measured interval itself, not a wait for an event
    const per = new Map([...pids].map(([k, pid]) => [k, { cpu: (cpuMs(pid) - before.get(k)!.cpu) / IDLE_S, wakes: (wakeUps(pid) - before.get(k)!.wakes) / IDLE_S }]));
    for (const p of [root, serve, bare]) p.kill("SIGTERM");
    await Promise.all([root.exited, serve.exited, bare.exited]);
    const base = per.get("bare bun (baseline)")!;
    return [...per]
      .filter(([k]) => !k.startsWith("bare"))
      .map(([k, v]) => ({
        bench: "idle",
        label: `${k}: CPU while idle`,
        value: v.cpu,
        unit: "ms/s",
        baseline: { label: "a bare bun waiting", value: base.cpu, unit: "ms/s" },
        ratio: { value: v.cpu / Math.max(base.cpu, TICK_MS / IDLE_S), meaning: "x the bare bun" },
        notes: [`wake-ups ${fmt(v.wakes, 1)} a second (bare bun ${fmt(base.wakes, 1)}), over ${IDLE_S} s, load average ${load}`],
      }));
  } finally {
    removeTempDir(runHome);
    removeTempDir(serveHome);
  }
}

const bench: Bench = {
  name: "idle",
  title: `CPU and wake-ups a second of a waiting root, coordinator, worker and atomic serve over ${IDLE_S} s, vs a bare bun`,
  run,
};

export default bench;
