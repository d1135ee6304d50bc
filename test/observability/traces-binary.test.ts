/**
 * OpenTelemetry traces through the real binary, sent to a local OTLP/HTTP
 * receiver (test/helpers/otlp-receiver.ts) and configured only by the
 * standard OTEL_* variables:
 *
 * - a mixed run (shell stage, an openai stage failing once then retried,
 *   a tool step, a child run) is one trace: the run's invoke_workflow span
 *   at the top, invoke_agent / shell spans per attempt under it, chat spans
 *   with the fake provider's exact usage, execute_tool spans, the child's
 *   invoke_workflow under its child step, a quick ctx.tool step counted on
 *   the run's span; the shell stage got TRACEPARENT
 *   naming its own span. Protobuf, then the same over http/json.
 * - kill -9 during a stage, then resume: still one trace; the lost drive's
 *   span and its abandoned attempt are ended by the resume, the resumed
 *   drive is a child of the first.
 * - the config file's `telemetry` keys do the same as the variables;
 * - unconfigured: nothing is sent; a receiver that is down: one warning,
 *   the run completes; a malformed endpoint: one warning, the run completes.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";
import { inOrder, startFakeOpenAI, text, toolCall, type FakeOpenAI } from "../helpers/fake-openai.ts";
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "../helpers/otlp-receiver.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const MIXED = join(import.meta.dir, "fixtures", "mixed.ts");
const ONE_SHELL = join(import.meta.dir, "fixtures", "one-shell.ts");

/**
 * The fake provider's script for one mixed run: flaky (a paid tool turn, then 401), its retry, the child's stage
 * (`rateLimited`: its call first answered 429 with Retry-After: 1, then retried).
 */
function mixedScript(rateLimited = false) {
  return inOrder(
    toolCall("list", {}, { usage: { prompt: 100, completion: 10, cached: 40, cost: 0.000123 } }),
    { status: 401, body: '{"error":{"message":"bad key"}}' },
    text("retried", { prompt: 200, completion: 20, cost: 0.000456 }),
    ...(rateLimited ? [{ status: 429, headers: { "retry-after": "1" }, body: '{"error":{"message":"slow down"}}' }] : []),
    text("from the child", { prompt: 7, completion: 3, cost: 0.000018 }),
  );
}

async function withParts(fn: (fake: FakeOpenAI, otlp: OtlpReceiver) => Promise<void>, rateLimited = false) {
  const fake = await startFakeOpenAI(mixedScript(rateLimited));
  const otlp = await startOtlpReceiver();
  try {
    await fn(fake, otlp);
  } finally {
    await fake.close();
    await otlp.close();
  }
}

function runIdOf(stdout: string): string {
  return JSON.parse(stdout.trim().split("\n").at(-1)!).runId as string;
}

/** Waits for the span named `name` (and matching `extra`), sent by now or still to come; after 20 s, fails naming what did arrive. */
async function span(otlp: OtlpReceiver, name: string, extra: (s: ReceivedSpan) => boolean = () => true): Promise<ReceivedSpan> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const got = otlp.spans.items.map((s) => `${s.name} ${JSON.stringify(s.attributes["atomic.attempt"] ?? "")} lost=${s.attributes["atomic.lost"] ?? ""} resumed=${s.attributes["atomic.resumed"] ?? ""}`);
      reject(new Error(`no span ${name} (matching) arrived; got:\n${got.join("\n")}`));
    }, 20_000);
  });
  try {
    return await Promise.race([otlp.spans.first((s) => s.name === name && extra(s)), late]);
  } finally {
    clearTimeout(timer);
  }
}

async function checkMixedTrace(otlp: OtlpReceiver, runId: string, prepOut: string, rateLimited = false) {
  const run = await span(otlp, "invoke_workflow mixed");
  const child = await span(otlp, "invoke_workflow mixed-child");
  const prep = await span(otlp, "shell prep");
  const flaky1 = await span(otlp, "invoke_agent flaky", (s) => s.attributes["atomic.attempt"] === 1);
  const flaky2 = await span(otlp, "invoke_agent flaky", (s) => s.attributes["atomic.attempt"] === 2);
  const inner = await span(otlp, "invoke_agent inner");
  const childStep = await span(otlp, "child mixed-child");
  const listTool = await span(otlp, "execute_tool list");
  // the run's span ends last: every other span has arrived with it
  const chats = otlp.spans.items.filter((s) => s.name === "chat fake-model");
  expect(chats.length).toBe(3);

  // one trace, the run at its top
  const all = otlp.spans.items;
  expect(new Set(all.map((s) => s.traceId)).size).toBe(1);
  expect(run.parentSpanId).toBe("");
  expect(run.attributes).toMatchObject({ "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "mixed", "atomic.run.id": runId, "atomic.resumed": false });
  expect(run.resource["service.name"]).toBe("atomic-test");
  expect(run.resource["deployment.environment.name"]).toBe("ci");
  for (const s of [prep, flaky1, flaky2, childStep]) expect(s.parentSpanId).toBe(run.spanId);
  // the ctx.tool step: counted on the run's span when it was quick (under 25 ms), else a span of its own under the run
  const noteSpans = all.filter((s) => s.name === "tool note");
  expect(noteSpans.length + Number(run.attributes["atomic.steps.short"] ?? 0)).toBe(1);
  for (const s of noteSpans) expect(s.parentSpanId).toBe(run.spanId);
  expect(child.parentSpanId).toBe(childStep.spanId);
  expect(inner.parentSpanId).toBe(child.spanId);
  // the shell stage got its own span's context
  expect(prepOut).toBe(`traceparent=00-${run.traceId}-${prep.spanId}-01`);
  expect(prep.attributes["atomic.stage.kind"]).toBe("shell");
  // the failed attempt and its retry
  expect(flaky1.statusCode).toBe(2);
  expect(flaky1.attributes).toMatchObject({ "atomic.retry": false, "error.type": "provider_auth", "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "flaky", "gen_ai.request.model": "fake-model" });
  expect(flaky2.statusCode).not.toBe(2);
  expect(flaky2.attributes["atomic.retry"]).toBe(true);
  expect(listTool.parentSpanId).toBe(flaky1.spanId);
  expect(listTool.attributes).toMatchObject({ "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "list" });
  // each model call, with the provider's exact numbers (input tokens include the cached ones, as the convention counts them)
  const [c1, c2, c3] = chats as [ReceivedSpan, ReceivedSpan, ReceivedSpan];
  expect(c1.parentSpanId).toBe(flaky1.spanId);
  expect(c2.parentSpanId).toBe(flaky2.spanId);
  expect(c3.parentSpanId).toBe(inner.spanId);
  const genai = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "fake-model",
    "gen_ai.response.model": "fake-model",
  };
  expect(c1.attributes).toMatchObject({ ...genai, "gen_ai.response.finish_reasons": ["tool_calls"], "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 10, "gen_ai.usage.cache_read.input_tokens": 40, "gen_ai.usage.cache_creation.input_tokens": 0, "atomic.cost_micro_usd": 123 });
  expect(c2.attributes).toMatchObject({ ...genai, "gen_ai.response.finish_reasons": ["stop"], "gen_ai.usage.input_tokens": 200, "gen_ai.usage.output_tokens": 20, "gen_ai.usage.cache_read.input_tokens": 0, "atomic.cost_micro_usd": 456 });
  expect(c3.attributes).toMatchObject({ ...genai, "gen_ai.usage.input_tokens": 7, "gen_ai.usage.output_tokens": 3, "atomic.cost_micro_usd": 18 });
  if (rateLimited) {
    // the child's call met a 429 (Retry-After: 1 s), waited at least that long, and was retried
    expect(c3.attributes).toMatchObject({ "atomic.call.retries": 1, "atomic.call.retried_codes": ["provider_rate_limit"] });
    expect(Number(c3.attributes["atomic.rate_limit.wait_ms"])).toBeGreaterThanOrEqual(1000);
  } else expect(c3.attributes["atomic.rate_limit.wait_ms"]).toBeUndefined();
  // the drive's journal appends, timed (the metric's histogram has the same count: metrics-binary.test.ts)
  expect(Number(run.attributes["atomic.journal.appends"])).toBeGreaterThan(0);
  expect(Number(run.attributes["atomic.journal.append_ms.sum"])).toBeGreaterThan(0);
  expect(Number(run.attributes["atomic.journal.append_ms.max"])).toBeLessThanOrEqual(Number(run.attributes["atomic.journal.append_ms.sum"]));
  // attempt totals on the stage span
  expect(flaky2.attributes).toMatchObject({ "gen_ai.usage.input_tokens": 200, "gen_ai.usage.output_tokens": 20, "atomic.cost_micro_usd": 456 });
}

e2eTest("a mixed run is one trace over OTLP/HTTP protobuf: GenAI spans with the provider's numbers, TRACEPARENT in the stage", async () => {
  await withParts(async (fake, otlp) => {
    const home = makeTempDir();
    const env = {
      ATOMIC_OPENAI_BASE_URL: fake.url,
      OPENAI_API_KEY: "sk-test",
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
      OTEL_SERVICE_NAME: "atomic-test",
      OTEL_RESOURCE_ATTRIBUTES: "deployment.environment.name=ci",
    };
    const r = await runAtomic(["run", MIXED, "--json"], { home, env });
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
    await checkMixedTrace(otlp, out.runId, out.outputs.prep, true);
    expect(otlp.spans.items.every((s) => s.encoding === "protobuf")).toBe(true);
  }, true);
});

e2eTest("OTEL_EXPORTER_OTLP_PROTOCOL=http/json sends the same trace as JSON to the traces endpoint", async () => {
  await withParts(async (fake, otlp) => {
    const home = makeTempDir();
    const env = {
      ATOMIC_OPENAI_BASE_URL: fake.url,
      OPENAI_API_KEY: "sk-test",
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${otlp.url}/v1/traces`,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_SERVICE_NAME: "atomic-test",
      OTEL_RESOURCE_ATTRIBUTES: "deployment.environment.name=ci",
    };
    const r = await runAtomic(["run", MIXED, "--json"], { home, env });
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
    await checkMixedTrace(otlp, out.runId, out.outputs.prep);
    expect(otlp.spans.items.every((s) => s.encoding === "json")).toBe(true);
  });
});

e2eTest("kill -9 during a stage, then resume: one trace; the resume ends the lost drive's spans and continues under it", async () => {
  await withParts(async (fake, otlp) => {
    const home = makeTempDir();
    const marker = join(makeTempDir(), "hold");
    const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test", OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url };
    const proc = spawnAtomic(["run", MIXED, "--json", "--input", `hold=${marker}`], { home, env });
    const lines = lineWatcher(proc.stdout);
    const runId = (JSON.parse(await lines.waitFor(/"type":"run_started"/)) as { runId: string }).runId;
    await waitUntil(() => existsSync(`${marker}.ready`), 30_000, "the hold stage to start");
    proc.kill("SIGKILL");
    await proc.exited;
    writeFileSync(`${marker}.go`, "");
    const resumed = await runAtomic(["resume", runId, "--json"], { home, env });
    expect(resumed.code).toBe(0);
    expect(runIdOf(resumed.stdout)).toBe(runId);

    const first = await span(otlp, "invoke_workflow mixed", (s) => s.attributes["atomic.lost"] === true);
    const second = await span(otlp, "invoke_workflow mixed", (s) => s.attributes["atomic.resumed"] === true && s.attributes["atomic.lost"] !== true);
    const lostHold = await span(otlp, "shell hold", (s) => s.attributes["atomic.lost"] === true);
    const hold = await span(otlp, "shell hold", (s) => s.attributes["atomic.lost"] !== true);
    const child = await span(otlp, "invoke_workflow mixed-child");
    // spans the first drive ended before the kill (prep, flaky's calls) went out; none of theirs is re-sent
    const flakyCalls = await span(otlp, "chat fake-model");
    expect(new Set(otlp.spans.items.map((s) => s.traceId)).size).toBe(1);
    expect(first.parentSpanId).toBe("");
    expect(first.statusCode).toBe(2);
    expect(second.parentSpanId).toBe(first.spanId);
    expect(lostHold.parentSpanId).toBe(first.spanId);
    expect(lostHold.statusCode).toBe(2);
    expect(lostHold.attributes["atomic.attempt"]).toBe(1);
    expect(hold.parentSpanId).toBe(second.spanId);
    expect(hold.attributes["atomic.attempt"]).toBe(2);
    expect(child.traceId).toBe(first.traceId);
    expect(flakyCalls.traceId).toBe(first.traceId);
    expect(otlp.spans.items.filter((s) => s.name === "invoke_workflow mixed" && s.parentSpanId === "").length).toBe(1);
  });
});

e2eTest("unconfigured, nothing is sent; a receiver that is down or a malformed endpoint is one warning and the run completes", async () => {
  await withParts(async (fake, otlp) => {
    const home = makeTempDir();
    const base = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test", OTEL_SERVICE_NAME: "atomic-test" };
    const plain = await runAtomic(["run", MIXED, "--json"], { home, env: base });
    expect(plain.code).toBe(0);
    expect(plain.stderr).toBe("");
    expect(JSON.parse(plain.stdout.trim().split("\n").at(-1)!).outputs.prep).toBe("traceparent=");
    expect(otlp.requests).toBe(0);
  });
  const down = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
  const closedPort = down.port;
  await down.stop(true);
  await withParts(async (fake) => {
    const home = makeTempDir();
    const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test", OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${closedPort}` };
    const r = await runAtomic(["run", MIXED, "--json"], { home, env });
    expect(r.code).toBe(0);
    const warnings = r.stderr.split("\n").filter((l) => l.startsWith("warning: traces could not be sent"));
    expect(warnings.length).toBe(1);
    expect(r.stderr.trim().split("\n").length).toBe(1);
  });
  await withParts(async (fake) => {
    const home = makeTempDir();
    const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test", OTEL_EXPORTER_OTLP_ENDPOINT: "localhost:4318" };
    const r = await runAtomic(["run", MIXED, "--json"], { home, env });
    expect(r.code).toBe(0);
    expect(r.stderr.trim()).toBe('warning: OTEL_EXPORTER_OTLP_ENDPOINT is not an http(s) URL ("localhost:4318"), so traces are off (hint: e.g. http://localhost:4318).');
  });
});

e2eTest("OTLP headers that are no name=value list: one warning naming the variable and the entry, never its value; nothing sent, the run completes", async () => {
  const otlp = await startOtlpReceiver();
  try {
    const home = makeTempDir();
    const cases: [string, string][] = [
      ["authorization=Bearer%20abc,sk-secret-key", 'its entry 2 has no "="'],
      ["x-api-key=%zz-secret", "its entry 1 has a value that is not percent-encoded right"],
      ["bad name=secret", "its entry 1 does not start with a header name"],
    ];
    for (const [headers, why] of cases) {
      const r = await runAtomic(["run", ONE_SHELL], { home, env: { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_EXPORTER_OTLP_HEADERS: headers } });
      expect(r.code).toBe(0);
      expect(r.stderr.trim()).toBe(`warning: OTEL_EXPORTER_OTLP_HEADERS is not a list of name=value pairs (${why}), so traces are off (hint: e.g. OTEL_EXPORTER_OTLP_HEADERS="x-api-key=KEY,x-team=infra", with % , and spaces in a value written %25 %2C %20).`);
      expect(r.stderr).not.toContain("secret");
    }
    // the traces variable is read first, and the same way
    const r = await runAtomic(["run", ONE_SHELL], { home, env: { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_EXPORTER_OTLP_TRACES_HEADERS: "x-team" } });
    expect(r.code).toBe(0);
    expect(r.stderr.trim()).toStartWith('warning: OTEL_EXPORTER_OTLP_TRACES_HEADERS is not a list of name=value pairs (its entry 1 has no "=")');
    expect(otlp.requests).toBe(0);
    // a good list (spaces around, a value percent-encoded): sent, with the header decoded
    const keyed = await startOtlpReceiver("127.0.0.1", { name: "x-note", value: "a,b" });
    try {
      const ok = await runAtomic(["run", ONE_SHELL], { home, env: { OTEL_EXPORTER_OTLP_ENDPOINT: keyed.url, OTEL_EXPORTER_OTLP_HEADERS: " x-team = infra , x-note=a%2Cb " } });
      expect(ok.code).toBe(0);
      expect(ok.stderr).toBe("");
      await span(keyed, "invoke_workflow one-shell");
      expect(keyed.refused).toBe(0);
    } finally {
      await keyed.close();
    }
  } finally {
    await otlp.close();
  }
});

e2eTest("the config file's telemetry keys turn traces on when no OTEL_* variable is set", async () => {
  await withParts(async (fake, otlp) => {
    const home = makeTempDir();
    writeFileSync(join(home, "config.json"), JSON.stringify({ telemetry: { otlpEndpoint: otlp.url, protocol: "http/json", serviceName: "from-config", resourceAttributes: { team: "infra" } } }));
    const r = await runAtomic(["run", MIXED, "--json"], { home, env: { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" } });
    expect(r.code).toBe(0);
    const run = await span(otlp, "invoke_workflow mixed");
    expect(run.encoding).toBe("json");
    expect(run.resource).toMatchObject({ "service.name": "from-config", team: "infra" });
    expect(run.attributes["atomic.run.id"]).toBe(runIdOf(r.stdout));
  });
});
