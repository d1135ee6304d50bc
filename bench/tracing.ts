/**
 * Traces on vs off: the `sequential` workflow (2,000 no-op durable
 * `ctx.tool` steps; quick ones are counted on the run's span, not sent one
 * by one: engine/tracing/otel-tracer.ts) through `dist/atomic
 * run`, with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a local OTLP/HTTP
 * receiver in this process (it answers 200 at once and counts the bytes),
 * alternating with the same run and no OTEL_* variable set (traces off:
 * the SDK is not even loaded). Spawn to exit, so the end-of-drive flush is
 * counted.
 *
 * And an agent loop: one openai stage of 10 turns (a `list` tool call per
 * turn, then the answer) against the benchmarks' fake provider answering
 * each turn in 300-800 ms like a model (bench/latency.ts); each turn is a
 * chat span and an execute_tool span. For information, the same with 50
 * turns answered at once: there the fixed cost of traces in a process
 * (loading the SDK, the last export) has nothing to hide behind.
 *
 * Target: traces on at most 1.05x the time of traces off (issue 29), for
 * the sequential steps and the paced agent loop.
 */

import { alternate, atomicBin, binaryEnv, fmt, median, removeTempDir, runTimed, spread, startFakeProvider, tempDir, WORKFLOWS, type Bench, type Result } from "./lib.ts";
import { join } from "node:path";

const STEPS = 2_000;
const PACED_TURNS = 10;
const INSTANT_TURNS = 50;
const REPS = 7;
const TARGET = 1.05;

interface Subject {
  name: string;
  reps: number;
  /** Informational: no target. */
  info?: boolean;
  label: string;
  args: string[];
  env: Record<string, string>;
}

async function measure(subject: Subject): Promise<Result> {
  const bin = atomicBin();
  let requests = 0;
  let bytes = 0;
  const receiver = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      requests++;
      bytes += (await req.arrayBuffer()).byteLength;
      return new Response(new Uint8Array(), { headers: { "content-type": "application/x-protobuf" } });
    },
  });
  const homes: string[] = [];
  try {
    const run = async (traced: boolean) => {
      const home = tempDir();
      homes.push(home);
      const env = binaryEnv(home, { ...subject.env, ...(traced ? { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.port}` } : {}) });
      const r = await runTimed([bin, "--quiet", "run", ...subject.args], { env, capture: true });
      if (r.code !== 0) throw new Error(`atomic run exited ${r.code}: ${r.stderr}`);
      if (r.stderr !== "") throw new Error(`atomic run wrote to stderr: ${r.stderr}`);
      return r.ms;
    };
    // Warm-up (page cache, the binary's first start); not counted.
    await run(false);
    await run(true);
    const before = { requests, bytes };
    const samples = await alternate(subject.reps, { off: () => run(false), on: () => run(true) });
    const ratio = median(samples.on) / median(samples.off);
    return {
      bench: "tracing",
      label: `traces on (OTLP/HTTP protobuf to a local receiver), ${subject.label}, spawn to exit`,
      value: median(samples.on),
      unit: "ms",
      baseline: { label: "the same run with traces off (no OTEL_* variable)", value: median(samples.off), unit: "ms" },
      ratio: { value: ratio, meaning: "on ÷ off" },
      ...(subject.info ? {} : { target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET } }),
      notes: [
        `on: ${spread(samples.on)}; off: ${spread(samples.off)}`,
        `the receiver got ${fmt((requests - before.requests) / subject.reps, 1)} requests and ${fmt((bytes - before.bytes) / subject.reps / 1024, 0)} KiB per traced run`,
        `traces on cost ${fmt(median(samples.on) - median(samples.off))} ms more per run (medians)`,
      ],
    };
  } finally {
    await receiver.stop(true);
    for (const h of homes) removeTempDir(h);
  }
}

const bench: Bench = {
  name: "tracing",
  title: `traces on vs off: ${fmt(STEPS, 0)} sequential durable steps, and agent loops (dist/atomic)`,
  async run() {
    const results = [await measure({ name: "sequential", reps: REPS, label: `${fmt(STEPS, 0)} sequential no-op steps`, args: [join(WORKFLOWS, "steps.ts"), "--input", `steps=${STEPS}`], env: {} })];
    const agent = (prompt: string) => [join(WORKFLOWS, "agent.ts"), "--input", `prompt=${prompt}`];
    const paced = await startFakeProvider({ FAKE_LATENCY_TURNS: String(PACED_TURNS) });
    try {
      const env = { ATOMIC_OPENAI_BASE_URL: paced.url, OPENAI_API_KEY: "sk-bench" };
      results.push(await measure({ name: "agent-loop", reps: 3, label: `one openai stage of ${PACED_TURNS} turns (a tool call each), each answered in 300-800 ms`, args: agent("latency:1"), env }));
    } finally {
      paced.stop();
    }
    const instant = await startFakeProvider({ FAKE_TURNS: String(INSTANT_TURNS) });
    try {
      const env = { ATOMIC_OPENAI_BASE_URL: instant.url, OPENAI_API_KEY: "sk-bench" };
      results.push(await measure({ name: "agent-loop-instant", reps: REPS, info: true, label: `one openai stage of ${INSTANT_TURNS} turns answered at once (information)`, args: agent("go"), env }));
    } finally {
      instant.stop();
    }
    return results;
  },
};

export default bench;
