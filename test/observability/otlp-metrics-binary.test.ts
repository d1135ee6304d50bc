/**
 * The `/metrics` instruments over OTLP/HTTP through the real binary, to a
 * local receiver (test/helpers/otlp-metrics-receiver.ts), configured only
 * by the standard OTEL_* variables:
 *
 * - after a mixed run, `atomic serve` pushes protobuf exports whose token
 *   and cost sums equal `atomic show`'s totals, and every counter and
 *   gauge equals its `/metrics` sample (counters as cumulative monotonic
 *   sums named without `_total`, histograms with the same buckets);
 * - http/json to OTEL_EXPORTER_OTLP_METRICS_ENDPOINT says the same; the
 *   last values go out when the server stops;
 * - OTEL_METRICS_EXPORTER=none or nothing set: nothing is sent and nothing
 *   said; a malformed endpoint or a bad interval: one warning, `/metrics`
 *   serves on; a receiver that is down: one warning, the server serves on
 *   and stops cleanly.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";
import { inOrder, startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";
import { startOtlpMetricsReceiver, total, type MetricExport } from "../helpers/otlp-metrics-receiver.ts";
import { parseMetrics, type Sample } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const MIXED = join(import.meta.dir, "fixtures", "mixed.ts");
const ONE_SHELL = join(import.meta.dir, "fixtures", "one-shell.ts");

/** `atomic serve --port 0` in `home`: its address and token, and a way to scrape /metrics. */
async function serve(home: string, env: Record<string, string>) {
  const proc = spawnAtomic(["serve", "--port", "0"], { home, env });
  const login = (await lineWatcher(proc.stdout).waitFor(/^status page: /)).slice("status page: ".length).trim();
  const [, url, token] = /^(http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(login)!;
  const scrape = async () => {
    const res = await fetch(`${url}metrics`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    return parseMetrics(await res.text());
  };
  const stop = async () => {
    proc.kill("SIGINT");
    expect(await proc.exited).toBe(0);
    return new Response(proc.stderr).text();
  };
  return { proc, scrape, stop };
}

/** Every counter and gauge sample of /metrics has its OTLP point, with the same value and labels. */
function expectSameNumbers(samples: Sample[], e: MetricExport): void {
  const plain = samples.filter((s) => !/_(bucket|sum|count)$/.test(s.name) || s.name === "atomic_journal_appends_total");
  expect(plain.length).toBeGreaterThan(10);
  for (const s of plain) {
    const name = s.name.replace(/_total$/, "");
    const point = e.points.find((p) => p.metric === name && JSON.stringify(Object.entries(p.attributes).sort()) === JSON.stringify(Object.entries(s.labels).sort()));
    expect({ name: s.name, labels: s.labels, value: point?.value }).toEqual({ name: s.name, labels: s.labels, value: s.value });
    if (s.name.endsWith("_total")) expect({ name, kind: point!.kind, monotonic: point!.monotonic, temporality: point!.temporality }).toEqual({ name, kind: "sum", monotonic: true, temporality: 2 });
  }
}

e2eTest("after a mixed run, atomic serve pushes the /metrics numbers over OTLP/HTTP protobuf: tokens and cost as atomic show totals them", async () => {
  const fake = await startFakeOpenAI(
    inOrder(
      toolCall("list", {}, { usage: { prompt: 100, completion: 10, cached: 40, cost: 0.000123 } }),
      { status: 401, body: '{"error":{"message":"bad key"}}' },
      text("retried", { prompt: 200, completion: 20, cost: 0.000456 }),
      text("from the child", { prompt: 7, completion: 3, cost: 0.000018 }),
    ),
  );
  const otlp = await startOtlpMetricsReceiver();
  try {
    const home = makeTempDir();
    const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
    const run = await runAtomic(["run", MIXED, "--json"], { home, env });
    expect(run.code).toBe(0);
    const runId = JSON.parse(run.stdout.trim().split("\n").at(-1)!).runId as string;
    const totals = JSON.parse((await runAtomic(["show", runId, "--json"], { home, env })).stdout).totals.usage;

    // Each export, and the last one at stop, may take as long as the interval (the SDK holds the timeout to it):
    // 2 s, since 200 ms timed out reading the journal and sending on a busy machine (a warning at stop).
    const server = await serve(home, { ...env, OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_METRIC_EXPORT_INTERVAL: "2000", OTEL_SERVICE_NAME: "atomic-metrics-test" });
    const e = await otlp.exports.first((x) => total(x, "atomic_stages_started") > 0);
    const samples = await server.scrape();
    expect(await server.stop()).toBe("");

    expect(e.encoding).toBe("protobuf");
    expect(e.resource["service.name"]).toBe("atomic-metrics-test");
    expect(total(e, "atomic_tokens", { kind: "input" })).toBe(totals.inputTokens);
    expect(total(e, "atomic_tokens", { kind: "output" })).toBe(totals.outputTokens);
    expect(total(e, "atomic_tokens", { kind: "cache_read" })).toBe(totals.cacheReadTokens);
    expect(Math.round(total(e, "atomic_cost_usd") * 1_000_000)).toBe(totals.costMicroUsd);
    expect(total(e, "atomic_tokens", { workflow: "mixed", runner: "openai", model: "fake-model", kind: "input" })).toBe(260);
    expect(total(e, "atomic_stages_started")).toBe(4);
    expect(total(e, "atomic_runs", { status: "completed" })).toBe(1);
    // histograms: the same buckets as /metrics, per label set; each count is its buckets' sum
    const shell = e.points.find((p) => p.metric === "atomic_stage_duration_seconds" && p.attributes.runner === "shell")!;
    expect(shell).toMatchObject({ kind: "histogram", unit: "s", temporality: 2, count: 1, bounds: [0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600] });
    expect(shell.bucketCounts.reduce((a, b) => a + b, 0)).toBe(1);
    const bucketCount = samples.find((s) => s.name === "atomic_stage_duration_seconds_count" && s.labels.runner === "shell" && s.labels.workflow === "mixed")!.value;
    expect(shell.count).toBe(bucketCount);
    expectSameNumbers(samples, e);
    // bounded labels: no run id
    expect(JSON.stringify(e.points)).not.toContain(runId);
  } finally {
    await fake.close();
    await otlp.close();
  }
});

e2eTest("http/json to the metrics endpoint says the same, and the last values go out when the server stops", async () => {
  const otlp = await startOtlpMetricsReceiver();
  try {
    const home = makeTempDir();
    expect((await runAtomic(["run", ONE_SHELL], { home })).code).toBe(0);
    // an interval longer than the test: the only export is the one the server sends as it stops
    const env = { OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: `${otlp.url}/v1/metrics`, OTEL_EXPORTER_OTLP_PROTOCOL: "http/json", OTEL_METRIC_EXPORT_INTERVAL: "600000" };
    const server = await serve(home, env);
    const samples = await server.scrape();
    expect(otlp.requests).toBe(0);
    expect(await server.stop()).toBe("");
    expect(otlp.requests).toBe(1);
    const e = otlp.exports.items[0]!;
    expect(e.encoding).toBe("json");
    expect(e.resource["service.name"]).toBe("atomic");
    expect(total(e, "atomic_stages_completed")).toBe(1);
    expect(total(e, "atomic_stage_duration_seconds", { workflow: "one-shell", runner: "shell" })).toBe(1);
    expectSameNumbers(samples, e);
  } finally {
    await otlp.close();
  }
});

e2eTest("off or misconfigured, nothing is sent: none or no variable is silent; a bad endpoint, a bad interval, bad headers or a receiver that is down is one warning", async () => {
  const otlp = await startOtlpMetricsReceiver();
  const down = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
  const closed = `http://127.0.0.1:${down.port}`;
  await down.stop(true);
  try {
    const home = makeTempDir();
    expect((await runAtomic(["run", ONE_SHELL], { home })).code).toBe(0);
    const off: Record<string, string>[] = [{}, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_METRICS_EXPORTER: "none" }, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_METRICS_EXPORTER: "prometheus" }];
    for (const env of off) {
      const server = await serve(home, env);
      await server.scrape();
      expect(await server.stop()).toBe("");
    }
    expect(otlp.requests).toBe(0);

    const bad: [Record<string, string>, string][] = [
      [{ OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: "localhost:4318" }, 'warning: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is not an http(s) URL ("localhost:4318"), so OTLP metrics are off (hint: e.g. http://localhost:4318).'],
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_METRIC_EXPORT_INTERVAL: "soon" }, 'warning: OTEL_METRIC_EXPORT_INTERVAL must be a whole number of milliseconds above 0, got "soon", so OTLP metrics are off (hint: e.g. OTEL_METRIC_EXPORT_INTERVAL=60000).'],
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_METRICS_EXPORTER: "statsd" }, "warning: OTEL_METRICS_EXPORTER=statsd is not an exporter atomic has, so OTLP metrics are off (hint: use otlp, prometheus (the /metrics page) or none)."],
      // headers that are no name=value list: the warning never shows the value (an API key)
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_EXPORTER_OTLP_METRICS_HEADERS: "x-team=infra,sk-secret-key" }, 'warning: OTEL_EXPORTER_OTLP_METRICS_HEADERS is not a list of name=value pairs (its entry 2 has no "="), so OTLP metrics are off (hint: e.g. OTEL_EXPORTER_OTLP_METRICS_HEADERS="x-api-key=KEY,x-team=infra", with % , and spaces in a value written %25 %2C %20).'],
    ];
    for (const [env, warning] of bad) {
      const server = await serve(home, env);
      await server.scrape();
      expect((await server.stop()).trim()).toBe(warning);
    }
    expect(otlp.requests).toBe(0);

    const server = await serve(home, { OTEL_EXPORTER_OTLP_ENDPOINT: closed, OTEL_METRIC_EXPORT_INTERVAL: "100", OTEL_METRIC_EXPORT_TIMEOUT: "1000" });
    const stderr = lineWatcher(server.proc.stderr);
    await stderr.waitFor(/^warning: metrics could not be sent to the OTLP receiver/);
    expect((await server.scrape()).length).toBeGreaterThan(10);
    server.proc.kill("SIGINT");
    expect(await server.proc.exited).toBe(0);
    await waitUntil(() => stderr.ended, 10_000, "the server's stderr to end");
    expect(stderr.lines.filter((l: string) => l.startsWith("warning:")).length).toBe(1);
  } finally {
    await otlp.close();
  }
});
