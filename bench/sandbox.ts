/**
 * Stage sandboxes (docs/design/sandbox.md): what they add, as a user of
 * `dist/atomic` feels it.
 *
 * 1. A shell stage's start: `dist/atomic run` of a workflow of STAGES shell
 *    stages `true` in sequence (bench/workflows/sandboxed-shell.ts), every
 *    stage sandboxed (bubblewrap, network "none") or none, the two runs
 *    alternating, ROUNDS each. A stage's time is its journal's
 *    `step_started` to `step_ended` (the events of `--json`): queued on the
 *    pool, started on a worker, run, its result recorded. The first stage
 *    of each run is left out of it (it waits for the pool's first worker)
 *    and counted in the second figure instead. Figure: the median
 *    sandboxed stage; baseline: the median unsandboxed one; target: at
 *    most 20 ms more (absolute; the ratio is printed for information).
 * 2. For information: a whole run of one such stage, spawn to exit,
 *    sandboxed or not, alternating: what the first sandboxed stage of a
 *    run costs, with whatever bubblewrap's check costs the root and the
 *    worker (once bwrap has worked here, neither tries it again:
 *    runners/sandbox/bwrap.ts). A run takes 300-1,000 ms on the shared
 *    machine, so its median moves by tens of ms between runs of the
 *    bench: no target.
 * 3. The provider proxy: 200 GETs to a local HTTP server straight and 200
 *    through the provider gate's proxy socket (provider-gate.ts: the
 *    request in absolute form over its Unix socket, forwarded to the
 *    server), alternating, each a new connection as a proxied agent makes
 *    one per request at worst. Target: the proxy adds at most 5 ms at the
 *    median. (The hop inside the sandbox, net-init.ts's loopback listener,
 *    is one more socket pipe, not measured here.)
 * The load average is printed with each figure: on the shared build
 * machine both sides move with it. Admission pacing is off in the bench's
 * home (config.json), as in bench/pool.ts. Needs bwrap
 * (scripts/install-bubblewrap.sh).
 */

import { writeFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { openProviderGate } from "../src/runners/sandbox/provider-gate.ts";
import { WORKFLOWS, alternate, atomicBin, binaryEnv, fmt, loadAverage, median, readNdjson, removeTempDir, spawnTracked, tempDir, type Bench, type Result } from "./lib.ts";

const ROUNDS = 12;
const STAGES = 11;
const SINGLE_RUNS = 20;
const REQUESTS = 200;
const WORKFLOW = join(WORKFLOWS, "sandboxed-shell.ts");

/** `atomic run` of `n` stages, sandboxed or not: its wall time and each stage's time (started to ended, in the journal). */
async function atomicRun(bin: string, env: Record<string, string>, n: number, sandbox: boolean): Promise<{ ms: number; stages: number[] }> {
  const t = performance.now();
  const proc = spawnTracked([bin, "run", WORKFLOW, "--input", `n=${n}`, "--input", `sandbox=${sandbox}`, "--json"], { env, stdout: "pipe", stderr: "pipe" });
  const started = new Map<string, number>();
  const stages: number[] = [];
  let status: unknown;
  await readNdjson(proc.stdout as ReadableStream<Uint8Array>, (e) => {
    if (e.type === "step_started") started.set(String(e.position), Number(e.at));
    if (e.type === "step_ended") stages.push(Number(e.at) - started.get(String(e.position))!);
    if (e.type === "result") status = e.status;
  });
  await proc.exited;
  const ms = performance.now() - t;
  if (status !== "completed" || stages.length !== n) throw new Error(`atomic run (sandbox ${sandbox}) ended ${String(status)}: ${await new Response(proc.stderr as ReadableStream).text()}`);
  return { ms, stages };
}

function get(opts: { socketPath?: string; port?: number; path: string }): Promise<number> {
  const t = performance.now();
  return new Promise((resolve, reject) => {
    const req = request({ ...(opts.socketPath ? { socketPath: opts.socketPath } : { host: "127.0.0.1", port: opts.port }), path: opts.path, agent: false }, (res) => {
      res.resume();
      res.on("end", () => (res.statusCode === 200 ? resolve(performance.now() - t) : reject(new Error(`status ${res.statusCode}`))));
    });
    req.on("error", reject);
    req.end();
  });
}

const bench: Bench = {
  name: "sandbox",
  title: "stage sandboxes: a sandboxed shell stage's start, and the provider proxy's cost per request",
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    const home = tempDir("atomic-bench-sandbox-");
    writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { maxLoadPerCpu: 1_000_000 } }));
    const env = binaryEnv(home);
    const stages = { plain: [] as number[], boxed: [] as number[] };
    const loads: string[] = [loadAverage()];
    let single: Record<"plain" | "boxed", number[]>;
    try {
      await alternate(ROUNDS, {
        plain: async () => (stages.plain.push(...(await atomicRun(bin, env, STAGES, false)).stages.slice(1)), 0),
        boxed: async () => (stages.boxed.push(...(await atomicRun(bin, env, STAGES, true)).stages.slice(1)), 0),
      });
      loads.push(loadAverage());
      single = await alternate(SINGLE_RUNS, { plain: async () => (await atomicRun(bin, env, 1, false)).ms, boxed: async () => (await atomicRun(bin, env, 1, true)).ms });
      loads.push(loadAverage());
    } finally {
      removeTempDir(home);
    }
    const startResult = (label: string, boxed: number, plain: number, baseline: string, n: number, target: boolean): Result => ({
      bench: "sandbox",
      label,
      value: boxed,
      unit: "ms",
      baseline: { label: baseline, value: plain, unit: "ms" },
      ratio: { value: boxed / plain, meaning: "sandboxed ÷ unsandboxed" },
      ...(target ? { target: { text: `at most 20 ms more (${fmt(boxed - plain)} ms more)`, ok: boxed - plain <= 20 } } : {}),
      notes: [`${fmt(boxed - plain)} ms more; ${n} samples each; load average ${loads.join(" → ")}`],
    });
    const results = [
      startResult("sandboxed shell stage (true) through dist/atomic, median started to ended", median(stages.boxed), median(stages.plain), "the same stage unsandboxed", stages.boxed.length, true),
      startResult("atomic run of one sandboxed shell stage (true), median spawn to exit", median(single.boxed), median(single.plain), "the same run unsandboxed", SINGLE_RUNS, false),
    ];

    const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("ok") });
    const gate = openProviderGate([`127.0.0.1:${server.port}`]);
    try {
      const url = `http://127.0.0.1:${server.port}/`;
      const calls = await alternate(REQUESTS, { direct: () => get({ port: server.port, path: "/" }), proxied: () => get({ socketPath: join(gate.dir, "proxy.sock"), path: url }) });
      const direct = median(calls.direct);
      const proxied = median(calls.proxied);
      return [
        ...results,
        {
          bench: "sandbox",
          label: "GET through the provider proxy, median",
          value: proxied,
          unit: "ms",
          baseline: { label: "the same GET straight to the server", value: direct, unit: "ms" },
          ratio: { value: proxied / direct, meaning: "proxied ÷ direct" },
          target: { text: `at most 5 ms more at p50 (${fmt(proxied - direct)} ms more)`, ok: proxied - direct <= 5 },
          notes: [`${REQUESTS} samples each; load average ${loadAverage()}`],
        },
      ];
    } finally {
      gate.close();
      server.stop(true);
    }
  },
};

export default bench;
