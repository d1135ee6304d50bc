/**
 * A run without stages (issue 12, item 12): `dist/atomic run` of a 3-step
 * `ctx.tool` workflow (bench/workflows/steps.ts, steps=3) on the default
 * executor (the worker pool) against the same run with `--in-process`,
 * alternating, each in a fresh home.
 *
 * The figure is CPU time (user + system) of the whole process tree: the
 * rusage that waiting for the root returns, which includes every
 * descendant the tree itself waited for (a coordinator the root reaped,
 * the workers the coordinator reaped). A run that started a pool pays for
 * the coordinator and its workers here. Target: median at most 1.3x the
 * median of `--in-process`.
 */

import { join } from "node:path";
import { WORKFLOWS, atomicBin, binaryEnv, median, removeTempDir, settle, spawnTracked, spread, tempDir, type Bench, type Result } from "./lib.ts";

const REPS = 9;
const TARGET = 1.3;

/** CPU ms (user + system) of one `atomic run` and everything it waited for. */
async function runCpuMs(bin: string, extra: string[]): Promise<number> {
  const home = tempDir("atomic-bench-toolrun-");
  try {
    const proc = spawnTracked([bin, "run", join(WORKFLOWS, "steps.ts"), "--input", "steps=3", "--quiet", ...extra], { env: binaryEnv(home) });
    const code = await proc.exited;
    if (code !== 0) throw new Error(`atomic run ${extra.join(" ")} exited ${code}`);
    const usage = proc.resourceUsage();
    if (!usage) throw new Error("no resource usage for the run's process");
    return Number(usage.cpuTime.user + usage.cpuTime.system) / 1000; // microseconds (bigint)
  } finally {
    removeTempDir(home);
  }
}

const bench: Bench = {
  name: "toolrun",
  title: "a 3-step ctx.tool run: default (pool) vs --in-process, CPU of the process tree",
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    await runCpuMs(bin, []);
    await runCpuMs(bin, ["--in-process"]);
    const pooled: number[] = [];
    const inProcess: number[] = [];
    for (let i = 0; i < REPS; i++) {
      settle();
      inProcess.push(await runCpuMs(bin, ["--in-process"]));
      settle();
      pooled.push(await runCpuMs(bin, []));
    }
    const ratio = median(pooled) / median(inProcess);
    return [
      {
        bench: "toolrun",
        label: "CPU of a 3-step ctx.tool run (default executor)",
        value: median(pooled),
        unit: "ms",
        baseline: { label: "the same run with --in-process", value: median(inProcess), unit: "ms" },
        ratio: { value: ratio, meaning: "default ÷ --in-process" },
        target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET },
        notes: [`default: ${spread(pooled)}`, `--in-process: ${spread(inProcess)}`],
      },
    ];
  },
};

export default bench;
