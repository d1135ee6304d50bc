/**
 * Live model deltas: from the provider to `atomic attach` and to the stage
 * stream endpoint (docs/design/live-events.md).
 *
 * A run of STAGES openai agent stages on as many pool workers, all
 * streaming at once from a provider in this process that sends a delta
 * every DELTA_MS, each carrying the provider's clock when it was written
 * (`@<ms> `). Watching them: `atomic attach RUN --json` (every active
 * stage) and, through `atomic serve`, one `GET /api/runs/:id/stages/:s/stream`
 * per stage. Each marker's latency is when its watcher read it here minus
 * when the provider wrote it (the same clock: this process). Deltas of the
 * first WARMUP_MS after everything is attached are left out (workers and
 * subscriptions settling).
 *
 * Targets: p50 at most 50 ms and p99 at most 200 ms for each watcher; the
 * ratio printed is the figure over its target (at most 1 passes).
 */

import { writeFileSync } from "node:fs";
import { join } from "node:path";
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

async function run(): Promise<Result[]> {
  const bin = atomicBin();
  const home = tempDir("atomic-bench-live-");
  const release = Promise.withResolvers<void>();
  const fake = provider(release.promise);
  const env = binaryEnv(home, { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-bench" });
  // Every stage at once: no admission limit, no pacing by load (a busy 2-CPU machine would space the starts).
  writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { maxSessionsPerRun: STAGES, maxSessionsPerUser: STAGES, paceMs: 0, maxLoadPerCpu: 1000, minFreeMemoryMb: 0, slotsDir: join(home, "slots") } }));
  try {
    const serve = spawnTracked([bin, "--json", "serve", "--port", "0"], { env, stdout: "pipe", cwd: home });
    let serving: { url: string; tokenFile: string } | undefined;
    void lines(serve.stdout as ReadableStream<Uint8Array>, (l) => {
      if (!serving && l.includes('"url"')) serving = JSON.parse(l);
    });
    const runProc = spawnTracked([bin, "--json", "run", join(WORKFLOWS, "live.ts"), "--input", `n=${STAGES}`, "--workers", String(STAGES)], { env, stdout: "pipe", cwd: home });
    let runId: string | undefined;
    void lines(runProc.stdout as ReadableStream<Uint8Array>, (l) => {
      runId ??= /"runId":"([0-9a-z]+)"/.exec(l)?.[1];
    });
    await waitFor(() => fake.requests() >= STAGES && runId !== undefined && serving !== undefined, "every stage's first model call", 60_000, () => `${fake.requests()} calls, run ${runId ?? "not started"}, serve ${serving ? "up" : "not up"}`);

    let from = Number.POSITIVE_INFINITY;
    const viaAttach: number[] = [];
    const viaStream: number[] = [];
    const attach = spawnTracked([bin, "--json", "attach", runId!], { env, stdout: "pipe", cwd: home });
    let attached = 0;
    void lines(attach.stdout as ReadableStream<Uint8Array>, (l) => {
      const now = Date.now();
      if (l.includes('"type":"attached"')) attached++;
      else if (l.includes('"type":"text"')) latencies((JSON.parse(l) as { text: string }).text, now, from, viaAttach);
    });
    const token = (await Bun.file(serving!.tokenFile).text()).trim();
    let ready = 0;
    const streams = Array.from({ length: STAGES }, async (_, i) => {
      const res = await fetch(new URL(`/api/runs/${runId}/stages/s${i}/stream?from=now`, serving!.url), { headers: { Authorization: `Bearer ${token}` } });
      await lines(res.body!, (l) => {
        const now = Date.now();
        if (l.startsWith("event: ready")) ready++;
        else if (l.startsWith("data: ") && l.includes('"text_delta"')) latencies(l, now, from, viaStream);
      });
    });
    await waitFor(() => attached >= STAGES && ready >= STAGES, "attach and the streams to follow every stage", 60_000, () => `attach follows ${attached}, streams ready ${ready}`);
    from = Date.now() + WARMUP_MS;
    release.resolve();
    const code = await runProc.exited;
    if (code !== 0) throw new Error(`the run failed (exit ${code})`);
    await attach.exited;
    serve.kill("SIGTERM");
    await Promise.allSettled(streams);
    const expected = STAGES * Math.floor((DELTAS * DELTA_MS - WARMUP_MS) / DELTA_MS);
    const results: Result[] = [];
    for (const [label, xs] of [
      ["attach --json", viaAttach],
      ["stage stream (SSE)", viaStream],
    ] as const) {
      if (xs.length < expected * 0.9) throw new Error(`${label} saw ${xs.length} deltas of about ${expected}`);
      const p50 = percentile(xs, 50);
      const p99 = percentile(xs, 99);
      const notes = [`${xs.length} deltas from ${STAGES} stages streaming at once (one every ${DELTA_MS} ms each), max ${fmt(Math.max(...xs))} ms`];
      results.push({ bench: "attach-latency", label: `${label}: provider → view p50`, value: p50, unit: "ms", ratio: { value: p50 / P50_TARGET, meaning: `p50 / ${P50_TARGET} ms target` }, target: { text: `p50 <= ${P50_TARGET} ms (ratio <= 1)`, ok: p50 <= P50_TARGET }, notes });
      results.push({ bench: "attach-latency", label: `${label}: provider → view p99`, value: p99, unit: "ms", ratio: { value: p99 / P99_TARGET, meaning: `p99 / ${P99_TARGET} ms target` }, target: { text: `p99 <= ${P99_TARGET} ms (ratio <= 1)`, ok: p99 <= P99_TARGET } });
    }
    return results;
  } finally {
    fake.stop();
  }
}

const bench: Bench = { name: "attach-latency", title: `model deltas of ${STAGES} streaming stages, provider → atomic attach and → the stage stream endpoint`, run };
export default bench;
