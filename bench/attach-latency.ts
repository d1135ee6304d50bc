/**
 * Live model deltas: from the provider to `atomic attach` and to the stage
 * stream endpoint (docs/design/live-events.md), for stages on the root's
 * own workers and for stages on a worker host.
 *
 * A run of STAGES openai agent stages, all streaming at once from a
 * provider in this process that sends a delta every DELTA_MS, each
 * carrying the provider's clock when it was written (`@<ms> `). Watching
 * them: `atomic attach RUN --json` (every active stage) and, through
 * `atomic serve`, one `GET /api/runs/:id/stages/:s/stream` per stage. Each
 * marker's latency is when its watcher read it here minus when the
 * provider wrote it (the same clock: this process). Deltas of the first
 * WARMUP_MS after everything is attached are left out (workers and
 * subscriptions settling).
 *
 * Three runs, each on a journal of its own:
 * - local: SQLite, the stages on the root's own pool workers;
 * - local on Postgres: the same on a throw-away Postgres cluster (the
 *   baseline of the next);
 * - worker host: the same Postgres, the root with `--workers 0` and one
 *   `atomic worker` host (its own home) of STAGES slots running every
 *   stage; attach runs in a third home and serve in the root's, so every
 *   delta crosses the journal's live channel (the host's relay,
 *   src/fleet/live-relay.ts).
 *
 * Targets: p50 at most 50 ms and p99 at most 200 ms for each watcher of
 * each run; printed as the ratio to the target (at most 1 passes), and for
 * the worker host also as the ratio to the same watcher's figure on the
 * root's own workers over the same Postgres, measured just before.
 */

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { createDatabase, startCluster } from "../test/helpers/postgres.ts";
import { Host, startHost, stopHosts } from "./fleet.ts";
import { WORKFLOWS, atomicBin, binaryEnv, fmt, spawnTracked, tempDir, type Bench, type Result } from "./lib.ts";

const STAGES = 20;
const DELTA_MS = 25;
const DELTAS = 160; // 4 s of streaming per stage
const WARMUP_MS = 500;
const P50_TARGET = 50;
const P99_TARGET = 200;

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/** Markers `@<ms>` in a text, each one's latency at `now`. */
function latencies(text: string, now: number, from: number, out: number[]): void {
  for (const m of text.matchAll(/@(\d{13}) /g)) {
    const at = Number(m[1]);
    if (at >= from) out.push(now - at);
  }
}

/** A chat-completions endpoint streaming DELTAS deltas, one every DELTA_MS, each stamped when written. */
function provider(gate: Promise<void>) {
  const enc = new TextEncoder();
  const chunk = (delta: object, finish: string | null = null) =>
    enc.encode(`data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "fake-model", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`);
  let requests = 0;
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    fetch(req) {
      if (req.method !== "POST") return Response.json({ data: [{ id: "fake-model" }] });
      requests++;
      const body = new ReadableStream<Uint8Array>({
        async start(c) {
          c.enqueue(chunk({ role: "assistant" }));
          await gate;
          for (let i = 0; i < DELTAS; i++) {
            c.enqueue(chunk({ content: `@${Date.now()} ` }));
            await Bun.sleep(DELTA_MS);
          }
          c.enqueue(chunk({}, "stop"));
          c.enqueue(enc.encode(`data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "fake-model", choices: [], usage: { prompt_tokens: 10, completion_tokens: DELTAS } })}\n\n`));
          c.enqueue(enc.encode("data: [DONE]\n\n"));
          c.close();
        },
      });
      return new Response(body, { headers: { "Content-Type": "text/event-stream" } });
    },
  });
  return { url: `http://127.0.0.1:${server.port}/v1`, requests: () => requests, stop: () => server.stop(true) };
}

async function lines(stream: ReadableStream<Uint8Array>, onLine: (line: string) => void): Promise<void> {
  const dec = new TextDecoder();
  let buf = "";
  for await (const chunk of stream) {
    buf += dec.decode(chunk, { stream: true });
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      onLine(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  }
}

async function waitFor(cond: () => boolean, what: string, timeoutMs = 60_000, state?: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${state ? ` (${state()})` : ""}`);
    await Bun.sleep(20);
  }
}

interface Watched {
  attach: number[];
  stream: number[];
}

interface Setup {
  /** The environment of the root, serve and attach (the journal). */
  env: Record<string, string>;
  /** The root's own pool workers (0: the stages run on a worker host). */
  workers: number;
  /** attach's home (the root's when absent). */
  attachHome?: string;
}

/** Writes the admission config that lets every stage start at once (a busy 2-CPU machine would space the starts). */
function admitAll(home: string): void {
  writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { maxSessionsPerRun: STAGES, maxSessionsPerUser: STAGES, paceMs: 0, maxLoadPerCpu: 1000, minFreeMemoryMb: 0, slotsDir: join(home, "slots") } }));
}

/** One run of the workflow with both watchers; the latency of every delta each watcher read. */
async function measure(bin: string, home: string, fake: ReturnType<typeof provider>, release: () => void, setup: Setup): Promise<Watched> {
  const env = binaryEnv(home, { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-bench", ...setup.env });
  const serve = spawnTracked([bin, "--json", "serve", "--port", "0"], { env, stdout: "pipe", cwd: home });
  let serving: { url: string; tokenFile: string } | undefined;
  void lines(serve.stdout as ReadableStream<Uint8Array>, (l) => {
    if (!serving && l.includes('"url"')) serving = JSON.parse(l);
  });
  const runProc = spawnTracked([bin, "--json", "run", join(WORKFLOWS, "live.ts"), "--input", `n=${STAGES}`, "--workers", String(setup.workers)], { env, stdout: "pipe", cwd: home });
  let runId: string | undefined;
  void lines(runProc.stdout as ReadableStream<Uint8Array>, (l) => {
    runId ??= /"runId":"([0-9a-z]+)"/.exec(l)?.[1];
  });
  await waitFor(() => fake.requests() >= STAGES && runId !== undefined && serving !== undefined, "every stage's first model call", 120_000, () => `${fake.requests()} calls, run ${runId ?? "not started"}, serve ${serving ? "up" : "not up"}`);

  let from = Number.POSITIVE_INFINITY;
  const out: Watched = { attach: [], stream: [] };
  const attachEnv = setup.attachHome ? { ...env, ATOMIC_HOME: setup.attachHome } : env;
  const attach = spawnTracked([bin, "--json", "attach", runId!], { env: attachEnv, stdout: "pipe", cwd: home });
  let attached = 0;
  void lines(attach.stdout as ReadableStream<Uint8Array>, (l) => {
    const now = Date.now();
    if (l.includes('"type":"attached"')) attached++;
    else if (l.includes('"type":"text"')) latencies((JSON.parse(l) as { text: string }).text, now, from, out.attach);
  });
  const token = (await Bun.file(serving!.tokenFile).text()).trim();
  let ready = 0;
  const streams = Array.from({ length: STAGES }, async (_, i) => {
    const res = await fetch(new URL(`/api/runs/${runId}/stages/s${i}/stream?from=now`, serving!.url), { headers: { Authorization: `Bearer ${token}` } });
    await lines(res.body!, (l) => {
      const now = Date.now();
      if (l.startsWith("event: ready")) ready++;
      else if (l.startsWith("data: ") && l.includes('"text_delta"')) latencies(l, now, from, out.stream);
    });
  });
  await waitFor(() => attached >= STAGES && ready >= STAGES, "attach and the streams to follow every stage", 60_000, () => `attach follows ${attached}, streams ready ${ready}`);
  from = Date.now() + WARMUP_MS;
  release();
  const code = await runProc.exited;
  if (code !== 0) throw new Error(`the run failed (exit ${code})`);
  await attach.exited;
  serve.kill("SIGTERM");
  await serve.exited;
  await Promise.allSettled(streams);
  return out;
}

/** p50 and p99 of each watcher against the targets; with `baseline`, also as the ratio to its figures. */
function report(name: string, w: Watched, baseline?: { name: string; of: Watched }): Result[] {
  const expected = STAGES * Math.floor((DELTAS * DELTA_MS - WARMUP_MS) / DELTA_MS);
  const results: Result[] = [];
  for (const [label, key] of [
    ["attach --json", "attach"],
    ["stage stream (SSE)", "stream"],
  ] as const) {
    const xs = w[key];
    if (xs.length < expected * 0.9) throw new Error(`${name}, ${label} saw ${xs.length} deltas of about ${expected}`);
    const notes = [`${xs.length} deltas from ${STAGES} stages streaming at once (one every ${DELTA_MS} ms each), max ${fmt(Math.max(...xs))} ms`];
    for (const [p, target] of [
      [50, P50_TARGET],
      [99, P99_TARGET],
    ] as const) {
      const value = percentile(xs, p);
      const base = baseline ? percentile(baseline.of[key], p) : undefined;
      results.push({
        bench: "attach-latency",
        label: `${name}, ${label}: provider → view p${p}`,
        value,
        unit: "ms",
        ...(base !== undefined ? { baseline: { label: `${baseline!.name}, same watcher`, value: base, unit: "ms" } } : {}),
        ratio: base !== undefined ? { value: value / Math.max(1, base), meaning: `vs ${baseline!.name} (same run); to the target ${fmt(value / target, 3)}` } : { value: value / target, meaning: `p${p} / ${target} ms target` },
        target: { text: `p${p} <= ${target} ms`, ok: value <= target },
        ...(p === 50 ? { notes } : {}),
      });
    }
  }
  return results;
}

/** A scenario with a provider of its own (its gate opened once everything watches). */
async function scenario(bin: string, home: string, setup: Setup): Promise<Watched> {
  const release = Promise.withResolvers<void>();
  const fake = provider(release.promise);
  try {
    return await measure(bin, home, fake, release.resolve, setup);
  } finally {
    fake.stop();
  }
}

async function run(): Promise<Result[]> {
  const bin = atomicBin();
  const home = tempDir("atomic-bench-live-");
  admitAll(home);
  const local = await scenario(bin, home, { env: {}, workers: STAGES });
  const results = report("local", local);

  const cluster = await startCluster({ durable: true });
  const hosts: Host[] = [];
  try {
    const pgHome = tempDir("atomic-bench-live-pg-");
    admitAll(pgHome);
    const pgLocal = await scenario(bin, pgHome, { env: { ATOMIC_JOURNAL: await createDatabase(cluster, "live_local") }, workers: STAGES });
    results.push(...report("local on Postgres", pgLocal));

    const url = await createDatabase(cluster, "live_host");
    hosts.push(await startHost(bin, url, "faraway", { slots: STAGES }));
    const rootHome = tempDir("atomic-bench-live-root-");
    admitAll(rootHome);
    const remote = await scenario(bin, rootHome, { env: { ATOMIC_JOURNAL: url }, workers: 0, attachHome: tempDir("atomic-bench-live-elsewhere-") });
    results.push(...report("worker host", remote, { name: "local on Postgres", of: pgLocal }));
    return results;
  } finally {
    await stopHosts(hosts);
    cluster.stop();
  }
}

const bench: Bench = { name: "attach-latency", title: `model deltas of ${STAGES} streaming stages, provider → atomic attach and → the stage stream endpoint, on local workers and on a worker host`, run };
export default bench;
