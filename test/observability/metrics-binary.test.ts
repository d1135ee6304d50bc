/**
 * `/metrics` through the real binary after a mixed run (a shell stage, an
 * openai stage whose failed first attempt was paid for, its retry, a child
 * run's openai stage): `atomic serve` reads the journal the run wrote from
 * another process, and its token and cost counters equal `atomic show`'s
 * totals exactly; stage counts, duration histograms (by workflow and
 * runner) and runs by status agree with what happened; a 429 the retry
 * hid is a retry and a rate-limit wait, not an error; the drive's journal
 * appends are in the append histogram; labels carry no run id. The body is OpenMetrics text (it ends with `# EOF`).
 */

import { afterAll, afterEach, expect } from "bun:test";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";
import { inOrder, startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";
import { parseMetrics, sum } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const MIXED = join(import.meta.dir, "fixtures", "mixed.ts");

e2eTest("after a mixed run, /metrics counts the tokens and cost atomic show totals, by workflow, runner and model", async () => {
  const fake = await startFakeOpenAI(
    inOrder(
      toolCall("list", {}, { usage: { prompt: 100, completion: 10, cached: 40, cost: 0.000123 } }),
      { status: 401, body: '{"error":{"message":"bad key"}}' },
      text("retried", { prompt: 200, completion: 20, cost: 0.000456 }),
      // the child's call: rate-limited once (Retry-After: 1 s), then answered
      { status: 429, headers: { "retry-after": "1" }, body: '{"error":{"message":"slow down"}}' },
      text("from the child", { prompt: 7, completion: 3, cost: 0.000018 }),
    ),
  );
  try {
    const home = makeTempDir();
    const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
    const run = await runAtomic(["run", MIXED, "--json"], { home, env });
    expect(run.code).toBe(0);
    const runId = JSON.parse(run.stdout.trim().split("\n").at(-1)!).runId as string;
    const shown = JSON.parse((await runAtomic(["show", runId, "--json"], { home, env })).stdout);
    const totals = shown.totals.usage;
    expect(totals).toMatchObject({ inputTokens: 267, outputTokens: 33, cacheReadTokens: 40, costMicroUsd: 597 });

    const serve = spawnAtomic(["serve", "--port", "0"], { home, env });
    const login = (await lineWatcher(serve.stdout).waitFor(/^status page: /)).slice("status page: ".length).trim();
    const [, url, token] = /^(http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(login)!;
    const res = await fetch(`${url}metrics`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.headers.get("content-type")).toContain("application/openmetrics-text");
    const body = await res.text();
    serve.kill("SIGINT");
    await serve.exited;
    expect(body.endsWith("# EOF\n")).toBe(true);
    const samples = parseMetrics(body);

    const tokens = (kind: string) => sum(samples, "atomic_tokens_total", { kind });
    expect(tokens("input")).toBe(totals.inputTokens);
    expect(tokens("output")).toBe(totals.outputTokens);
    expect(tokens("cache_read")).toBe(totals.cacheReadTokens);
    expect(tokens("cache_write")).toBe(totals.cacheWriteTokens);
    expect(Math.round(sum(samples, "atomic_cost_usd_total", {}) * 1_000_000)).toBe(totals.costMicroUsd);
    expect(sum(samples, "atomic_model_turns_total", {})).toBe(totals.turns);
    // by workflow: the child's stage is the child workflow's; the runner and model label every usage sample
    expect(sum(samples, "atomic_tokens_total", { workflow: "mixed-child", kind: "input" })).toBe(7);
    expect(sum(samples, "atomic_tokens_total", { workflow: "mixed", runner: "openai", model: "fake-model", kind: "input" })).toBe(260);
    // stages: prep, flaky x2, inner; one failed attempt
    expect(sum(samples, "atomic_stages_started_total", {})).toBe(4);
    expect(sum(samples, "atomic_stages_failed_total", {})).toBe(1);
    expect(sum(samples, "atomic_provider_errors_total", { provider: "openai", code: "provider_auth" })).toBe(1);
    // the 429 a retry hid: counted as a retry, not as an error; the call waited at least the Retry-After
    expect(sum(samples, "atomic_provider_errors_total", { code: "provider_rate_limit" })).toBe(0);
    expect(sum(samples, "atomic_provider_retries_total", { provider: "openai", code: "provider_rate_limit" })).toBe(1);
    expect(sum(samples, "atomic_rate_limit_waits_total", { provider: "openai" })).toBe(1);
    expect(sum(samples, "atomic_rate_limit_wait_seconds_total", { provider: "openai" })).toBeGreaterThanOrEqual(1);
    // the drive's journal appends, timed: some of the events appended, each in one bucket
    const appended = sum(samples, "atomic_journal_appends_total", {});
    const timed = sum(samples, "atomic_journal_append_seconds_count", {});
    expect(timed).toBeGreaterThan(0);
    expect(timed).toBeLessThan(appended);
    expect(sum(samples, "atomic_journal_append_seconds_bucket", { le: "+Inf" })).toBe(timed);
    expect(sum(samples, "atomic_journal_append_seconds_sum", {})).toBeGreaterThan(0);
    expect(sum(samples, "atomic_stage_duration_seconds_count", { workflow: "mixed", runner: "shell" })).toBe(1);
    expect(sum(samples, "atomic_stage_duration_seconds_count", { workflow: "mixed", runner: "openai", outcome: "failed" })).toBe(1);
    expect(sum(samples, "atomic_stage_duration_seconds_count", { workflow: "mixed", runner: "openai", outcome: "completed" })).toBe(1);
    expect(sum(samples, "atomic_stage_duration_seconds_count", { workflow: "mixed-child" })).toBe(1);
    // pooled stages waited in the queue (each start is observed once)
    expect(sum(samples, "atomic_stage_queue_wait_seconds_count", {})).toBe(4);
    expect(sum(samples, "atomic_runs", { status: "completed" })).toBe(1);
    expect(sum(samples, "atomic_questions_waiting", {})).toBe(0);
    // bounded labels: no run id anywhere in the body
    expect(body).not.toContain(runId);
    expect(body).not.toContain(shown.steps.find((s: { childRunId?: string }) => s.childRunId)?.childRunId ?? "no child");
  } finally {
    await fake.close();
  }
});
