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
 * Target: traces on at most 1.05x the time of traces off (issue 29).
 */

import { alternate, atomicBin, binaryEnv, fmt, median, removeTempDir, runTimed, spread, tempDir, WORKFLOWS, type Bench, type Result } from "./lib.ts";
import { join } from "node:path";

const STEPS = 2_000;
const REPS = 7;
const TARGET = 1.05;

async function measure(): Promise<Result> {
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
      const env = binaryEnv(home, traced ? { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.port}` } : {});
      const r = await runTimed([bin, "--quiet", "run", join(WORKFLOWS, "steps.ts"), "--input", `steps=${STEPS}`], { env, capture: true });
      if (r.code !== 0) throw new Error(`atomic run exited ${r.code}: ${r.stderr}`);
      if (r.stderr !== "") throw new Error(`atomic run wrote to stderr: ${r.stderr}`);
      return r.ms;
    };
    // Warm-up (page cache, the binary's first start); not counted.
    await run(false);
    await run(true);
    const before = { requests, bytes };
    const samples = await alternate(REPS, { off: () => run(false), on: () => run(true) });
    const ratio = median(samples.on) / median(samples.off);
    return {
      bench: "tracing",
      label: `traces on (OTLP/HTTP protobuf to a local receiver), ${fmt(STEPS, 0)} sequential no-op steps, spawn to exit`,
      value: median(samples.on),
      unit: "ms",
      baseline: { label: "the same run with traces off (no OTEL_* variable)", value: median(samples.off), unit: "ms" },
      ratio: { value: ratio, meaning: "on ÷ off" },
      target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET },
      notes: [
        `on: ${spread(samples.on)}; off: ${spread(samples.off)}`,
        `the receiver got ${fmt((requests - before.requests) / REPS, 1)} requests and ${fmt((bytes - before.bytes) / REPS / 1024, 0)} KiB per traced run (the run's span; quick ctx.tool steps are counted on it, not sent one by one)`,
      ],
    };
  } finally {
    await receiver.stop(true);
    for (const h of homes) removeTempDir(h);
  }
}

const bench: Bench = {
  name: "tracing",
  title: `traces on vs off on ${fmt(STEPS, 0)} sequential durable steps (dist/atomic)`,
  async run() {
    return [await measure()];
  },
};

export default bench;
