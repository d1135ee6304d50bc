/**
 * Status server: `dist/atomic serve` on a journal of 1,000 runs.
 *
 * 1. GET /api/runs (first page, 50 runs of 1,000, stage counts included)
 *    against GET /healthz (a trivial Hono JSON route of the same binary),
 *    alternating; load from wrk when installed (`apt-get install -y wrk`),
 *    else from a Bun load script in a process of its own.
 *    Target: runs list req/s at least 0.3 of the trivial route's.
 * 2. Event stream fan-out: this process journals an event every ~37 ms
 *    (as a run's driver would, from another process than the server) and
 *    measures, per client, the delay from the commit to the event's
 *    arrival; 100 clients on one run against 1 client, alternating.
 *    Target: p99 delay with 100 clients at most 5x the p99 with one.
 * 3. Page weight: the HTML, script and style sheet the run page loads.
 *    Target: under 150 KB uncompressed (ratio to that budget).
 * The first render of a 200-stage graph is measured in the browser test
 * (test/status/browser.test.ts, test-artifacts/status/render-200.json).
 */

import { join } from "node:path";
import { EVENT } from "../src/engine/journal-events.ts";
import { SqliteJournal } from "../src/journal/sqlite/sqlite-journal.ts";
import type { Journal } from "../src/journal/journal.ts";
import type { Lease } from "../src/journal/runs.ts";
import { newRunId, type RunId } from "../src/shared/ids.ts";
import { thisProcessHolder } from "../src/shared/process-info.ts";
import { StatusSource } from "../src/status/source.ts";
import { seedRun } from "../test/helpers/seed-runs.ts";
import { BUN, atomicBin, binaryEnv, fmt, median, removeTempDir, settle, spawnTracked, spread, tempDir, type Bench, type Result } from "./lib.ts";

const RUNS = 1_000;
const LOAD_SECONDS = 3;
const CONNECTIONS = 32;
const REPS = 3;
const LIST_TARGET = 0.3;
const CLIENTS = 100;
const EVENTS = 60;
const EVENT_GAP_MS = 37;
const SSE_TARGET = 5;
const PAGE_BUDGET = 150 * 1024;

// ---------------------------------------------------------------- the server

/** The server's clean address and the bearer header every route but /healthz needs. */
interface Served {
  url: string;
  auth: { authorization: string };
  stop(): Promise<void>;
}

async function startServer(home: string): Promise<Served> {
  const proc = spawnTracked([atomicBin(), "serve", "--port", "0"], { env: binaryEnv(home), stdout: "pipe", stderr: "pipe" });
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = "";
  const deadline = Date.now() + 15_000;
  while (!/status page: (\S+)/.test(text)) {
    if (Date.now() > deadline) throw new Error(`atomic serve did not print its URL: ${text}`);
    const { value, done } = await reader.read();
    if (done) throw new Error(`atomic serve exited: ${text}${await new Response(proc.stderr as ReadableStream).text()}`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const login = /status page: (\S+)/.exec(text)![1]!;
  const m = /^(.*\/)\?token=([0-9a-f]+)$/.exec(login);
  if (!m) throw new Error(`atomic serve printed no login URL: ${login}`);
  return {
    url: m[1]!,
    auth: { authorization: `Bearer ${m[2]!}` },
    async stop() {
      proc.kill("SIGINT");
      await proc.exited;
    },
  };
}

// ---------------------------------------------------------------- load

/** Requests per second against `url` for LOAD_SECONDS (with the bearer header), from wrk or a Bun load script. */
async function requestsPerSecond(url: string, auth: Served["auth"]): Promise<{ rps: number; tool: string }> {
  if (Bun.which("wrk")) {
    const proc = Bun.spawn(["wrk", "-t2", `-c${CONNECTIONS}`, `-d${LOAD_SECONDS}s`, "-H", `Authorization: ${auth.authorization}`, url], { stdout: "pipe", stderr: "pipe" });
    const out = await new Response(proc.stdout).text();
    await proc.exited;
    if (/Non-2xx or 3xx responses/.test(out)) throw new Error(`wrk saw error responses from ${url}:\n${out}`);
    const m = /Requests\/sec:\s+([\d.]+)/.exec(out);
    if (!m) throw new Error(`cannot read wrk's output:\n${out}`);
    return { rps: Number(m[1]), tool: `wrk -t2 -c${CONNECTIONS}` };
  }
  const script = `
    const [url, c, t] = process.argv.slice(-3);
    const conns = Number(c), ms = Number(t);
    const headers = { authorization: process.env.BENCH_AUTH };
    let n = 0, bad = 0;
    const end = performance.now() + ms;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: conns }, async () => {
      while (performance.now() < end) { const r = await fetch(url, { headers }); await r.arrayBuffer(); if (r.ok) n++; else bad++; }
    }));
    console.log(JSON.stringify({ n, bad, ms: performance.now() - t0 }));`;
  const proc = Bun.spawn([BUN, "-e", script, url, String(CONNECTIONS), String(LOAD_SECONDS * 1000)], {
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, BENCH_AUTH: auth.authorization },
  });
  const out = await new Response(proc.stdout).text();
  await proc.exited;
  const r = JSON.parse(out) as { n: number; bad: number; ms: number };
  if (r.bad > 0) throw new Error(`${r.bad} error responses from ${url}`);
  return { rps: (r.n / r.ms) * 1000, tool: `a Bun load script, ${CONNECTIONS} connections` };
}

/** Building the list without the server's 100 ms response cache, in this process (µs per list). */
async function uncachedListMicros(journal: Journal): Promise<number[]> {
  const source = new StatusSource(journal);
  await source.listRuns({ limit: 50, offset: 0 });
  const samples: number[] = [];
  for (let r = 0; r < 5; r++) {
    settle();
    const t0 = performance.now();
    for (let i = 0; i < 200; i++) await source.listRuns({ limit: 50, offset: 0 });
    samples.push(((performance.now() - t0) / 200) * 1000);
  }
  return samples;
}

async function listBench({ url, auth }: Served, journal: Journal): Promise<Result> {
  const list = `${url}api/runs`;
  const first = (await (await fetch(list, { headers: auth })).json()) as { total: number; runs: unknown[] };
  if (first.total !== RUNS || first.runs.length !== 50) throw new Error(`expected 50 of ${RUNS} runs, got ${first.runs.length} of ${first.total}`);
  await requestsPerSecond(`${url}healthz`, auth); // warm-up
  const trivial: number[] = [];
  const runs: number[] = [];
  let tool = "";
  for (let i = 0; i < REPS; i++) {
    settle();
    trivial.push((await requestsPerSecond(`${url}healthz`, auth)).rps);
    settle();
    const r = await requestsPerSecond(list, auth);
    runs.push(r.rps);
    tool = r.tool;
  }
  const ratio = median(runs) / median(trivial);
  const build = await uncachedListMicros(journal);
  return {
    bench: "status",
    label: `GET /api/runs (50 of ${fmt(RUNS, 0)} runs) req/s`,
    value: median(runs),
    unit: "req/s",
    baseline: { label: "GET /healthz (trivial Hono JSON route, same binary)", value: median(trivial), unit: "req/s" },
    ratio: { value: ratio, meaning: "runs list ÷ trivial route" },
    target: { text: `ratio >= ${LIST_TARGET}`, ok: ratio >= LIST_TARGET },
    notes: [
      `load: ${tool}, ${LOAD_SECONDS} s per sample`,
      `runs list: ${spread(runs, "req/s")}`,
      `trivial: ${spread(trivial, "req/s")}`,
      `the server rebuilds a list at most every 100 ms per query; one build (2 queries, 50 summaries from the stage-count cache): ${spread(build, "us")} in process`,
    ],
  };
}

// ---------------------------------------------------------------- event stream fan-out

/** A live run whose events this process appends, as a driver in another process would. */
async function liveRun(journal: Journal): Promise<{ runId: RunId; lease: Lease }> {
  const runId = newRunId();
  const lease = await journal.acquireLease(runId, thisProcessHolder("bench"), { timeoutMs: 120_000 });
  await journal.append(lease, [
    {
      runId,
      type: EVENT.runStarted,
      payload: { workflow: "ticks", depth: 0 },
      newRun: { rootId: runId, parentId: null, parentKey: null, depth: 0, workflowName: "ticks", workflowPath: "/bench/ticks.ts", workflowDigest: "bench", inputs: {} },
    },
  ]);
  return { runId, lease };
}

const now = () => performance.timeOrigin + performance.now();

/** Opens `n` streams, journals EVENTS events, returns every client's delay per event (ms). */
async function fanOut({ url, auth }: Served, journal: Journal, n: number): Promise<number[]> {
  const { runId, lease } = await liveRun(journal);
  const sentAt = new Map<number, number>();
  const delays: number[] = [];
  const abort = new AbortController();
  let readyCount = 0;
  let doneCount = 0;
  const clients = Array.from({ length: n }, async () => {
    const res = await fetch(`${url}api/runs/${runId}/stream?from=now`, { signal: abort.signal, headers: auth });
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    let got = 0;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        const at = now();
        buf += decoder.decode(value, { stream: true });
        let i: number;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (block.includes("event: ready")) readyCount++;
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (!data || !block.includes("event: journal")) continue;
          const seq = (JSON.parse(data) as { seq: number }).seq;
          const sent = sentAt.get(seq);
          if (sent !== undefined) delays.push(at - sent);
          if (++got === EVENTS) {
            doneCount++;
            return;
          }
        }
      }
    } catch {
      // aborted at the end
    }
  });
  const deadline = Date.now() + 20_000;
  while (readyCount < n) {
    if (Date.now() > deadline) throw new Error(`only ${readyCount} of ${n} streams opened`);
    await Bun.sleep(5);
  }
  for (let i = 0; i < EVENTS; i++) {
    const [outcome] = await journal.append(lease, [{ runId, type: "bench_tick", payload: { i } }]);
    if (outcome?.status !== "appended") throw new Error(`append failed: ${JSON.stringify(outcome)}`);
    sentAt.set(outcome.seq, now());
    await Bun.sleep(EVENT_GAP_MS);
  }
  const end = Date.now() + 10_000;
  while (doneCount < n && Date.now() < end) await Bun.sleep(10);
  abort.abort();
  await Promise.all(clients);
  if (doneCount < n) throw new Error(`only ${doneCount} of ${n} clients got all ${EVENTS} events`);
  await journal.releaseLease(lease);
  return delays;
}

function p99(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(s.length * 0.99) - 1)]!;
}

async function sseBench(url: Served, journal: Journal): Promise<Result> {
  const single: number[] = [];
  const many: number[] = [];
  for (let i = 0; i < 2; i++) {
    settle();
    single.push(...(await fanOut(url, journal, 1)));
    settle();
    many.push(...(await fanOut(url, journal, CLIENTS)));
  }
  const ratio = p99(many) / p99(single);
  return {
    bench: "status",
    label: `SSE p99 delay, ${CLIENTS} clients on one run`,
    value: p99(many),
    unit: "ms",
    baseline: { label: "SSE p99 delay, 1 client", value: p99(single), unit: "ms" },
    ratio: { value: ratio, meaning: `${CLIENTS} clients ÷ 1 client (p99, commit to arrival)` },
    target: { text: `ratio <= ${SSE_TARGET}`, ok: ratio <= SSE_TARGET },
    notes: [
      `server polls the journal every 100 ms (another process writes the run); ${EVENTS} events ${EVENT_GAP_MS} ms apart, 2 rounds each`,
      `1 client: median ${fmt(median(single))} ms; ${CLIENTS} clients: median ${fmt(median(many))} ms over ${many.length} deliveries`,
    ],
  };
}

// ---------------------------------------------------------------- page weight

async function pageBench({ url, auth }: Served, runId: string): Promise<Result> {
  const html = await (await fetch(`${url}runs/${runId}`, { headers: auth })).text();
  const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1]!);
  let bytes = Buffer.byteLength(html);
  const parts = [`html ${fmt(bytes / 1024, 1)} KB`];
  for (const a of assets) {
    const body = await (await fetch(`${url}${a.slice(1)}`, { headers: auth })).arrayBuffer();
    bytes += body.byteLength;
    parts.push(`${a.split("?")[0]} ${fmt(body.byteLength / 1024, 1)} KB`);
  }
  if (assets.length < 2) throw new Error(`the page names ${assets.length} assets, expected a script and a style sheet`);
  return {
    bench: "status",
    label: "run page weight (HTML + JS + CSS, uncompressed)",
    value: bytes / 1024,
    unit: "KB",
    baseline: { label: "budget", value: PAGE_BUDGET / 1024, unit: "KB" },
    ratio: { value: bytes / PAGE_BUDGET, meaning: "page ÷ budget" },
    target: { text: "ratio < 1 (under 150 KB)", ok: bytes < PAGE_BUDGET },
    notes: [parts.join(", ")],
  };
}

const bench: Bench = {
  name: "status",
  title: `status server: runs list vs trivial route, SSE fan-out to ${CLIENTS} clients, page weight`,
  async run(): Promise<Result[]> {
    const home = tempDir();
    let server: Awaited<ReturnType<typeof startServer>> | undefined;
    const journal = await SqliteJournal.open(join(home, "atomic.db"), { durability: "normal" });
    try {
      let last = "";
      for (let i = 0; i < RUNS; i++) last = await seedRun(journal, { stages: 3, workflow: `wf-${i % 7}`, status: i % 10 === 0 ? "failed" : "completed" });
      server = await startServer(home);
      const results = [await listBench(server, journal), await sseBench(server, journal), await pageBench(server, last)];
      return results;
    } finally {
      await server?.stop();
      await journal.close();
      removeTempDir(home);
    }
  },
};

export default bench;
