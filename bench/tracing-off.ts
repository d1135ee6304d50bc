/**
 * Traces off cost nothing (issue 29): `dist/atomic run` with no OTEL_*
 * variable and no telemetry config, against a binary built from the same
 * sources with tracing bypassed (`scripts/build.ts --without-tracing`: its
 * loadTracer answers "off" without reading a setting, so the drive never
 * looks for a tracer), alternating, spawn to exit. Two subjects: the
 * `sequential` workflow (2,000 no-op durable `ctx.tool` steps: every
 * engine event goes past the place a tracer would be fed) and one openai
 * stage of 50 turns answered at once (a tool call each: the stage and
 * model paths a tracer would wrap). The bypassed binary is built first
 * (about half a minute), into a temp dir.
 *
 * Target: off ÷ bypassed at most 1.03 for each: no difference beyond the
 * noise of alternating spawn-to-exit runs (bench/tracing.ts measures traces
 * on against off).
 */

import { join } from "node:path";
import { alternate, atomicBin, binaryEnv, BUN, fmt, loadAverage, median, removeTempDir, ROOT, runTimed, spread, startFakeProvider, tempDir, WORKFLOWS, type Bench, type Result } from "./lib.ts";

const STEPS = 2_000;
const TURNS = 50;
const REPS = 9;
const TARGET = 1.03;

/** The binary with tracing bypassed, built into `dir`. */
async function bypassedBinary(dir: string): Promise<string> {
  const out = join(dir, "atomic-without-tracing");
  const built = await runTimed([BUN, join(ROOT, "scripts", "build.ts"), out, "--without-tracing"], { capture: true, timeoutMs: 300_000 });
  if (built.code !== 0) throw new Error(`building the binary without tracing failed: ${built.stderr}`);
  return out;
}

async function measure(name: string, label: string, bins: { off: string; bypassed: string }, args: string[], extraEnv: Record<string, string>): Promise<Result> {
  const homes: string[] = [];
  try {
    const run = async (bin: string) => {
      const home = tempDir();
      homes.push(home);
      // no OTEL_* variable, whatever the bench's own environment holds
      const env = binaryEnv(home, extraEnv);
      for (const k of Object.keys(env)) if (k.startsWith("OTEL_")) delete env[k];
      const r = await runTimed([bin, "--quiet", "run", ...args], { env, capture: true });
      if (r.code !== 0) throw new Error(`${bin} run exited ${r.code}: ${r.stderr}`);
      return r.ms;
    };
    // Warm-up (page cache, each binary's first start); not counted.
    await run(bins.off);
    await run(bins.bypassed);
    const samples = await alternate(REPS, { off: () => run(bins.off), bypassed: () => run(bins.bypassed) });
    const ratio = median(samples.off) / median(samples.bypassed);
    return {
      bench: "tracing-off",
      label: `traces off (no OTEL_* variable), ${label}, spawn to exit`,
      value: median(samples.off),
      unit: "ms",
      baseline: { label: "the same run by a binary with tracing bypassed (build --without-tracing)", value: median(samples.bypassed), unit: "ms" },
      ratio: { value: ratio, meaning: "off ÷ bypassed" },
      target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET },
      notes: [`off: ${spread(samples.off)}; bypassed: ${spread(samples.bypassed)}`, `${name}: off costs ${fmt(median(samples.off) - median(samples.bypassed))} ms per run (medians)`, `load average ${loadAverage()}`],
    };
  } finally {
    for (const h of homes) removeTempDir(h);
  }
}

const bench: Bench = {
  name: "tracing-off",
  title: "traces off vs a binary with tracing bypassed: sequential durable steps and an agent loop (dist/atomic)",
  async run() {
    const dir = tempDir("atomic-bench-untraced-");
    try {
      const bins = { off: atomicBin(), bypassed: await bypassedBinary(dir) };
      const results = [await measure("sequential", `${fmt(STEPS, 0)} sequential no-op steps`, bins, [join(WORKFLOWS, "steps.ts"), "--input", `steps=${STEPS}`], {})];
      const provider = await startFakeProvider({ FAKE_TURNS: String(TURNS) });
      try {
        const env = { ATOMIC_OPENAI_BASE_URL: provider.url, OPENAI_API_KEY: "sk-bench" };
        results.push(await measure("agent-loop", `one openai stage of ${TURNS} turns answered at once`, bins, [join(WORKFLOWS, "agent.ts"), "--input", "prompt=go"], env));
      } finally {
        provider.stop();
      }
      return results;
    } finally {
      removeTempDir(dir);
    }
  },
};

export default bench;
