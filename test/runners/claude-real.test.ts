/**
 * The claude runner with the real Claude Code CLI (test/agents, pinned
 * version) through dist/atomic, pointed at the fake Anthropic provider
 * (test/helpers/fake-anthropic.ts) with its own HOME and XDG directories,
 * its non-essential traffic off and every other connection sent to the
 * fake's trap: each test fails if claude tried to reach anything else.
 * claude runs in atomic's default sandbox (agent stages are sandboxed: /tmp
 * and the home hidden, a PID namespace of its own), so a tool's markers go
 * in the stage's cwd (a temp dir of the test's, the same path inside and
 * out) and its `sleep` is found by its command line (a length of its own),
 * not by the `$!` it sees inside.
 *
 * Every stage names its model (MODEL): claude's default model, and with it
 * the prices of its own cost figure, changes with its version. The file
 * passes with the pinned claude and with the newest one tried
 * (ATOMIC_TEST_AGENTS, test/helpers/agents.ts).
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readdirSync, readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { describeRun } from "../helpers/real-agent-stage.ts";
import { atomicBin, lineWatcher, processesMatching, runAtomic, spawnAtomic, untilEvent, waitUntil } from "../helpers/atomic.ts";
import { AGENT_STEP_LIMIT_MS, AGENT_TEST_LIMIT_MS, agentBin, agentTest } from "../helpers/agents.ts";
import { withinLimit } from "../helpers/heavy.ts";
import { httpError, startFakeAnthropic, streamError, text, toolUse, type FakeAnthropic } from "../helpers/fake-anthropic.ts";
import { isLive, pidsRunning, processesWithEnv } from "../helpers/processes.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { startOtlpReceiver } from "../helpers/otlp-receiver.ts";
import { getRunner } from "../../src/runners/registry.ts";
import type { RunnerEvent, RunnerHandle, StageRequest } from "../../src/runners/types.ts";
import { cleanupNow, cleanupWhenIdle, parseNdjson, startedRunId } from "../e2e/support.ts";

import { untilExists } from "../helpers/gate.ts";
const WF = join(import.meta.dir, "fixtures", "claude-stage.ts");
/**
 * The model every stage names: one that the pinned claude (2.1.197, whose default it is) and 2.1.332 (whose
 * default is claude-opus-5-5) both price from their own table at the opus-4 family's list prices: $5/M input,
 * $25/M output, $0.5/M cache reads, $6.25/M cache writes.
 */
const MODEL = "claude-opus-4-8";
afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

interface Setup {
  fake: FakeAnthropic;
  home: string;
  env: Record<string, string>;
  marker: string;
  /** The stage's cwd: where its tools' markers go (the sandbox shows it at the same path). */
  cwd: string;
}

/** A fresh fake provider, atomic home and claude HOME (XDG dirs inside it). */
async function setup(): Promise<Setup> {
  const fake = await startFakeAnthropic();
  const home = makeTempDir("atomic-claude-home-");
  const user = makeTempDir("atomic-claude-user-");
  for (const d of [".config", ".cache", ".local/share", ".local/state"]) mkdirSync(join(user, d), { recursive: true });
  writeFileSync(join(home, "config.json"), JSON.stringify({ runners: { claude: { path: agentBin("claude") } } }));
  const marker = `m${crypto.randomUUID().slice(0, 8)}`;
  const env = {
    HOME: user,
    XDG_CONFIG_HOME: join(user, ".config"),
    XDG_CACHE_HOME: join(user, ".cache"),
    XDG_DATA_HOME: join(user, ".local/share"),
    XDG_STATE_HOME: join(user, ".local/state"),
    ANTHROPIC_BASE_URL: fake.url,
    ANTHROPIC_API_KEY: "sk-ant-fake",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_AUTOUPDATER: "1",
    DISABLE_TELEMETRY: "1",
    DISABLE_ERROR_REPORTING: "1",
    CLAUDE_CODE_MAX_RETRIES: "2",
    CLAUDE_TEST_MARKER: marker,
    ...fake.proxyEnv(),
  };
  return { fake, home, env, marker, cwd: makeTempDir("atomic-claude-cwd-") };
}

/** `atomic run --json` of the stage to its end (inputs through a file: a prompt may be longer than an argument can be). */
async function run(s: Setup, inputs: Record<string, string | boolean>, env: Record<string, string> = {}) {
  const args = ["run", WF, "--json", "--inputs-json", inputsFile({ model: MODEL, ...inputs })];
  const r = await runAtomic(args, { home: s.home, cwd: s.cwd, env: { ...s.env, ...env }, timeoutMs: AGENT_TEST_LIMIT_MS });
  const lines = parseNdjson(r.stdout);
  return { ...r, result: lines.at(-1) as { runId: string; outputs?: Record<string, any>; status?: string } | undefined };
}

async function show(s: Setup, runId: string) {
  return (await runAtomic(["show", runId], { home: s.home, env: s.env })).stdout;
}

async function done(s: Setup) {
  // The intercom broker a `send` started for this home.
  for (const pid of processesWithEnv("CLAUDE_TEST_MARKER", s.marker)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // it ended between the listing and the kill
    }
  }
  try {
    s.fake.assertOnlyFake();
  } finally {
    await s.fake.close();
  }
}

/** Every text the CLI sent the model as the user's (claude also puts "system" entries in `messages`). */
const userText = (body: any): string =>
  body.messages
    .filter((m: any) => m.role === "user")
    .map((m: any) => (typeof m.content === "string" ? m.content : m.content.map((b: any) => b.text ?? (typeof b.content === "string" ? b.content : "")).join("\n")))
    .join("\n");

// One claude start for three things none of which changes the others (docs/design/testing.md, session 12): the text
// reply, a prompt of 300 KiB (claude reads it from stdin) and `tools: []`.
agentTest(
  "a text reply: the answer, the prompt (300 KiB, read from stdin: it reaches the model whole) and system prompt delivered, usage and claude's own cost exact; tools: [] gives claude no tools at all",
  async () => {
    const s = await setup();
    const big = `BEGIN ${"x".repeat(300 * 1024)} END`;
    s.fake.push(text("Hello from the fake", { input: 11, output: 3, cacheRead: 5, cacheWrite: 2 }));
    const r = await run(s, { prompt: `say hello\n${big}`, system: "SYSTEM-NOTE: be brief", tools: "[]" });
    expect(r.code).toBe(0);
    expect(r.result!.outputs!.text).toBe("Hello from the fake");
    expect(s.fake.calls[0]!.body.tools ?? []).toEqual([]);
    expect(userText(s.fake.calls[0]!.body)).toContain(big);
    // The stage's system prompt is appended to Claude's own.
    const system = JSON.stringify(s.fake.calls[0]!.body.system);
    expect(system).toContain("SYSTEM-NOTE: be brief");
    expect(system).toContain("Claude");
    // MODEL's prices (claude's table): 11 in × $5/M + 3 out × $25/M + 5 cache reads × $0.5/M + 2 writes × $6.25/M = $0.00014500
    expect(r.result!.outputs!.usage).toMatchObject({ inputTokens: 11, outputTokens: 3, cacheReadTokens: 5, cacheWriteTokens: 2, costMicroUsd: 145, turns: 1, model: "claude-opus-4-8" }); // modelUsage's key without its "[1m]" context tag
    expect(s.fake.calls).toHaveLength(1);
    expect(userText(s.fake.calls[0]!.body)).toContain("say hello");
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);

// One claude start for the tool call and traces on: neither changes what the other checks (docs/design/testing.md, session 12).
agentTest(
  "a tool call: tools named in atomic's terms reach claude as its own; Bash runs; usage summed over both model calls; traces on: claude gets its own OpenTelemetry settings and the receiver's API key, and its interaction span nests under the stage's invoke_agent span",
  async () => {
    const s = await setup();
    // a receiver that refuses a request without its key, as a hosted one does
    const key = { name: "x-api-key", value: "otlp-key-claude-5b1e" };
    const otlp = await startOtlpReceiver("127.0.0.1", key);
    try {
      const file = join(s.cwd, "made-by-bash");
      // claude's Bash also looks for the key in its environment (spelled in two halves: the command's own line does not hold it)
      const look = 'k=otlp-key-; k="${k}claude-5b1e"; echo "variables with the key: $(env | grep -c -- "$k")"';
      s.fake.push(toolUse("Bash", { command: `touch ${file}; ${look}`, description: "make a file" }, { input: 100, output: 7, cacheRead: 50, cacheWrite: 20 }), text("made it", { input: 120, output: 9, cacheRead: 60 }));
      const r = await run(s, { prompt: "make the file", tools: JSON.stringify(["bash", "read", "list", "grep"]) }, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_EXPORTER_OTLP_HEADERS: `${key.name}=${key.value}` });
      expect(r.code).toBe(0);
      expect(existsSync(file)).toBe(true);
      // 2.1.332 adds a placeholder that keeps its deferred tool loading on ("never call this tool"): not a tool one can use
      const offered = s.fake.calls[0]!.body.tools.map((t: any) => t.name).filter((n: string) => n !== "DeferredToolPlaceholder");
      expect(offered.sort()).toEqual(["Bash", "Glob", "Grep", "Read"]);
      // (2.1.332 may put a message of its own after the tool's result)
      const result = s.fake.calls[1]!.body.messages.flatMap((m: any) => (Array.isArray(m.content) ? m.content : [])).find((b: any) => b.type === "tool_result");
      expect(result.is_error).toBeFalsy();
      expect(r.result!.outputs!.usage).toMatchObject({ inputTokens: 220, outputTokens: 16, cacheReadTokens: 110, cacheWriteTokens: 20, turns: 2 });
      const stage = await otlp.spans.first((x) => x.name === "invoke_agent ask");
      // claude's own span (sent by claude, not atomic), a child of the stage attempt's span in the run's trace
      // (claude flushes its spans before it exits, so they are in by the time the run ends; bounded for a clear failure)
      const own = await withinLimit(otlp.spans.first((x) => x.name === "claude_code.interaction"), 20_000, "claude's claude_code.interaction span");
      expect(own.resource["service.name"]).not.toBe("atomic");
      expect([own.traceId, own.parentSpanId]).toEqual([stage.traceId, stage.spanId]);
      expect(otlp.refused).toBe(0);
      // claude keeps its OTEL_* settings from its Bash: the key is not there
      expect(JSON.stringify(s.fake.calls[1]!.body.messages)).toContain("variables with the key: 0");
      await done(s);
    } finally {
      await otlp.close();
    }
  },
  AGENT_TEST_LIMIT_MS,
);

// One claude start for the refused tool and the unpriced model: neither changes what the other checks (docs/design/testing.md, session 12).
agentTest(
  "a tool claude refused is a warning on the stage: in the transcript and in show; a model claude has no price for: the stage is unpriced, not $0, when claude says its cost is a guess (2.1.332: costBasis unknown)",
  async () => {
    const s = await setup();
    const dir = s.cwd;
    // all the usage in the first call, none in the second: the stage's tokens are exactly the first call's
    s.fake.push(toolUse("Write", { file_path: join(dir, "x.txt"), content: "nope" }, { input: 11, output: 3, cacheRead: 5, cacheWrite: 2 }), text("could not write", { input: 0, output: 0 }));
    const r = await run(s, { prompt: "write it", model: "claude-nonesuch-1" }); // claude's default tools and permissions: Write needs an approval nobody can give
    expect(r.code).toBe(0);
    expect(existsSync(join(dir, "x.txt"))).toBe(false);
    const out = await show(s, r.result!.runId);
    expect(out).toMatch(/warning: claude refused the tool Write \(\{"file_path":.*\}\); hint: name it in the stage's tools to allow it, e.g. tools: \["write"\]/);
    const step = JSON.parse((await runAtomic(["show", r.result!.runId, "--json"], { home: s.home, env: s.env })).stdout).steps.find((x: any) => x.name === "ask");
    expect(readFileSync(join(step.artifactDir, "transcript.md"), "utf8")).toMatch(/## Warning\s+claude refused the tool Write/);
    const usage = r.result!.outputs!.usage;
    expect(usage).toMatchObject({ inputTokens: 11, outputTokens: 3, cacheReadTokens: 5, cacheWriteTokens: 2, model: "claude-nonesuch-1" });
    const events = readFileSync(join(step.artifactDir, "events.jsonl"), "utf8");
    if (events.includes('"costBasis"')) {
      // claude says whether it knew the price: it did not, and the config has none
      expect(events).toContain('"costBasis":"unknown"');
      expect(usage).toMatchObject({ costMicroUsd: 0, unpriced: true });
      expect(out).toContain("unpriced");
    } else {
      // 2.1.197 prices a model it does not know as its default one and does not say so: taken as reported
      expect(usage.costMicroUsd).toBe(145);
    }
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);

/** The stage's error as the run's report has it (`show --json`). */
async function stageError(s: Setup, runId: string): Promise<{ code: string; message: string }> {
  const report = JSON.parse((await runAtomic(["show", runId, "--json"], { home: s.home, env: s.env })).stdout);
  const step = (report.steps ?? report.report?.steps).find((x: any) => x.name === "ask");
  return step.error;
}

const RETRIES = (n: number, reply: ReturnType<typeof httpError>) => Array.from({ length: n }, () => reply);

for (const [name, replies, code, words] of [
  ["401", RETRIES(3, httpError(401, "authentication_error", "invalid x-api-key")), "provider_auth", /HTTP 401\): Invalid API key/],
  // A 400 that lasts: 2.1.197 gives up at once; 2.1.332 sends the request up to 5 more times, each without one
  // more of its beta features (headers, then its deferred tools), and ends as 2.1.197 does when none helped.
  ["400", RETRIES(10, httpError(400, "invalid_request_error", "max_tokens: 99999999 is greater than the maximum")), "provider_bad_request", /HTTP 400\): .*max_tokens: 99999999 is greater than the maximum/],
  // The wait is checked below: Retry-After, plus jitter in 2.1.332.
  ["429 with Retry-After", RETRIES(3, httpError(429, "rate_limit_error", "slow down please", { "retry-after": "3" })), "provider_rate_limit", /HTTP 429\): .*slow down please; claude retried 2 time\(s\), the last after \d+ ms/],
  ["500 that outlasts claude's retries", RETRIES(3, httpError(500, "api_error", "the fake broke")), "provider_unavailable", /HTTP 500\): .*the fake broke/],
  ["an error inside the stream (and the non-streaming fallback overloaded)", RETRIES(4, streamError("overloaded_error", "Overloaded right now")), "provider_unavailable", /HTTP 529\): .*Overloaded right now/],
] as const) {
  agentTest(
    `provider error ${name}: ${code}, naming claude, its exit status and the provider's words`,
    async () => {
      const s = await setup();
      s.fake.push(...replies);
      const r = await run(s, { prompt: "hi" });
      expect(r.code).not.toBe(0);
      const runId = (await runAtomic(["runs", "--json"], { home: s.home, env: s.env })).stdout.trim().split("\n").map((l) => JSON.parse(l))[0].id;
      const err = await stageError(s, runId);
      expect(err.code).toBe(code);
      expect(err.message).toMatch(words);
      expect(err.message).toContain("(claude exited with status 1)");
      // claude honours Retry-After (3 s here) and adds up to a quarter of it as jitter from 2.1.332 on (3,451 and
      // 3,718 ms seen; 2.1.197 waits exactly 3,000)
      const waited = /the last after (\d+) ms/.exec(err.message)?.[1];
      if (name.startsWith("429")) expect(Number(waited)).toBeWithin(3000, 3751);
      await done(s);
    },
    AGENT_TEST_LIMIT_MS,
  );
}

agentTest(
  "a 500 that claude's own retry survives: the stage completes, usage of the successful call only",
  async () => {
    const s = await setup();
    s.fake.push(httpError(500, "api_error", "blip"), text("recovered", { input: 11, output: 3 }));
    const r = await run(s, { prompt: "hi" });
    expect(r.code).toBe(0);
    expect(r.result!.outputs!.text).toBe("recovered");
    expect(s.fake.calls).toHaveLength(2);
    expect(r.result!.outputs!.usage).toMatchObject({ inputTokens: 11, outputTokens: 3, cacheReadTokens: 0, cacheWriteTokens: 0, costMicroUsd: 130 });
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);

agentTest(
  "a broken stream: claude falls back to a non-streaming call; its usage (zeros in result.usage) still counted from modelUsage",
  async () => {
    const s = await setup();
    s.fake.push(streamError("overloaded_error", "Overloaded"), text("after fallback", { input: 40, output: 6, cacheRead: 100 }));
    const r = await run(s, { prompt: "hi" });
    expect(r.code).toBe(0);
    expect(r.result!.outputs!.text).toBe("after fallback");
    expect(s.fake.calls.map((c) => c.body.stream === true)).toEqual([true, false]);
    // 40 × $5/M + 6 × $25/M + 100 × $0.5/M = $0.0004
    expect(r.result!.outputs!.usage).toMatchObject({ inputTokens: 40, outputTokens: 6, cacheReadTokens: 100, costMicroUsd: 400 });
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);

agentTest(
  "structured output through --json-schema: claude's StructuredOutput tool, the value validated",
  async () => {
    const s = await setup();
    s.fake.push(toolUse("StructuredOutput", { verdict: "ok" }), text("done"));
    const r = await run(s, { prompt: "judge it", structured: true });
    expect(r.code).toBe(0);
    expect(r.result!.outputs!.structured).toEqual({ verdict: "ok" });
    expect(s.fake.calls[0]!.body.tools.map((t: any) => t.name)).toContain("StructuredOutput");
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);

/** `atomic run` in the background; its run id from the "started run" line. */
async function start(s: Setup, inputs: Record<string, string | number>, extra: string[] = []) {
  const proc = spawnAtomic(["run", WF, "--inputs-json", inputsFile({ model: MODEL, ...inputs }), ...extra], { home: s.home, cwd: s.cwd, env: s.env });
  const out = lineWatcher(proc.stdout);
  const runId = startedRunId(await out.waitFor(/^started run /, AGENT_STEP_LIMIT_MS));
  return { proc, out, runId };
}

/** A file of the run's inputs, for `--inputs-json`. */
function inputsFile(inputs: Record<string, string | number | boolean>): string {
  const json = join(makeTempDir("atomic-claude-inputs-"), "inputs.json");
  writeFileSync(json, JSON.stringify(inputs));
  return json;
}

async function send(s: Setup, runId: string, text: string, mode: string) {
  const r = await runAtomic(["send", runId, "ask", text, "--mode", mode], { home: s.home, env: s.env });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
}

async function outputs(s: Setup, runId: string) {
  const report = JSON.parse((await runAtomic(["show", runId, "--json"], { home: s.home, env: s.env })).stdout);
  return report;
}

/** The shell command of a tool that says it started, then waits for `gate` to exist. */
const waitFor = (dir: string, gate: string) => `touch ${join(dir, "started")}; ${untilExists(join(dir, gate))}; echo released`;

agentTest(
  "multi-turn: a followUp is the next user turn of the same claude process; usage is the sum of both turns (result.usage is per turn)",
  async () => {
    const s = await setup();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    s.fake.push({ ...text("first answer", { input: 100, output: 10, cacheRead: 1000 }), hold: gate }, text("second answer", { input: 200, output: 20, cacheWrite: 300 }));
    const { proc, runId } = await start(s, { prompt: "first question" });
    await untilEvent(s.fake.callMatching(), "the first model call", { proc, limitMs: AGENT_STEP_LIMIT_MS });
    await send(s, runId, "second question", "followUp");
    release();
    expect(await proc.exited).toBe(0);
    expect(s.fake.calls).toHaveLength(2);
    expect(userText(s.fake.calls[1]!.body)).toContain("second question");
    const report = await outputs(s, runId);
    const out = report.run.outputs;
    expect(out.text).toBe("second answer");
    // 300 in × $5/M + 30 out × $25/M + 1000 reads × $0.5/M + 300 writes × $6.25/M = $0.004625
    expect(out.usage).toMatchObject({ inputTokens: 300, outputTokens: 30, cacheReadTokens: 1000, cacheWriteTokens: 300, costMicroUsd: 4625, turns: 2 });
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);

agentTest(
  "steer: a message written while a tool runs reaches the model in the same turn",
  async () => {
    const s = await setup();
    const dir = s.cwd;
    s.fake.push(toolUse("Bash", { command: waitFor(dir, "go"), description: "wait" }), text("steered answer"));
    const { proc, runId } = await start(s, { prompt: "work", tools: JSON.stringify(["bash"]) });
    await waitUntil(() => existsSync(join(dir, "started")), AGENT_STEP_LIMIT_MS, "the tool to start");
    await send(s, runId, "STEER-MESSAGE", "steer");
    // delivered to claude's stdin: the transcript says so
    await waitUntil(() => transcriptHas(s, runId, "Message (steer)"), AGENT_STEP_LIMIT_MS, "the steer to be delivered");
    // claude read it from its stdin while the tool runs: its session file records the message queued for the turn
    await waitUntil(() => claudeQueued(s, "STEER-MESSAGE"), AGENT_STEP_LIMIT_MS, "claude to queue the steer");
    writeFileSync(join(dir, "go"), "");
    expect(await proc.exited).toBe(0);
    expect(JSON.stringify(s.fake.calls[1]!.body.messages)).toContain("STEER-MESSAGE");
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);

agentTest(
  "interrupt: the running tool is stopped, the message is the next turn, the stage completes with its answer",
  async () => {
    const s = await setup();
    const dir = s.cwd;
    s.fake.push(toolUse("Bash", { command: waitFor(dir, "never"), description: "wait" }), text("new direction taken", { input: 7, output: 3 }));
    const { proc, runId } = await start(s, { prompt: "work", tools: JSON.stringify(["bash"]) });
    await waitUntil(() => existsSync(join(dir, "started")), AGENT_STEP_LIMIT_MS, "the tool to start");
    await send(s, runId, "NEW-DIRECTION", "interrupt");
    expect(await proc.exited).toBe(0);
    expect(userText(s.fake.calls.at(-1)!.body)).toContain("NEW-DIRECTION");
    const out = (await outputs(s, runId)).run.outputs;
    expect(out.text).toBe("new direction taken");
    expect(stageLeftovers(s).map(cmdline)).toEqual([]);
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);

/** Processes of the test's claude stage "ask" (every one carries the test's marker and the stage's name), not atomic's own. */
function stageLeftovers(s: Setup): number[] {
  const stage = new Set(processesWithEnv("ATOMIC_STAGE", "ask"));
  return processesWithEnv("CLAUDE_TEST_MARKER", s.marker).filter((pid) => stage.has(pid) && !cmdline(pid).startsWith(atomicBin()));
}

/**
 * A Bash tool whose shell notes the SIGTERM of the grace period with a builtin (a SIGKILL at once would leave no
 * note), then waits on: in the sandbox the grace ends when claude does (its PID namespace goes with it). Its `sleep`
 * ignores SIGTERM: a sleep ended by the same SIGTERM let the shell's `wait` end, and the shell with it, without its
 * note (beside 2 busy loops, 13 of 32 of the checks below). claude exits on its SIGTERM (143; it sends its tool no
 * signal of its own) and its end ends the tool. So the note proves what atomic controls: its SIGTERM reached the
 * tool's shell (a process group of claude's making) before anything killed it, no SIGKILL of atomic's and no early
 * end of the namespace (a signal to bwrap); the sleep's end, that nothing of the stage outlives the stop.
 */
const termNotingTool = (termed: string, sleep: string[], started: string): string =>
  `trap ': > ${termed}' TERM; (trap '' TERM; exec ${sleep.join(" ")}) & touch ${started}; wait; wait`;

/** A `sleep` of a length no other process has: found by its command line from outside the stage's PID namespace. */
const uniqueSleep = (): string[] => ["sleep", String(600 + Math.floor(Math.random() * 1_000_000))];

/**
 * The host PID of the one process running `argv` (the tool's `$!` is its PID inside the sandbox's namespace), once
 * it runs it: the marker is written right after the fork, maybe before the forked shell has exec'd the sleep.
 */
async function onlyPid(argv: string[]): Promise<number> {
  await waitUntil(() => pidsRunning(argv).length > 0, AGENT_STEP_LIMIT_MS, `${argv.join(" ")} to run`);
  const pids = pidsRunning(argv);
  expect(pids).toHaveLength(1);
  return pids[0]!;
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  } catch {
    return `${pid} (gone)`;
  }
}

/** Whether claude recorded `text` as a message queued mid-turn (a "queue-operation" line of its session file under HOME/.claude/projects). */
function claudeQueued(s: Setup, text: string): boolean {
  const projects = join(s.env.HOME!, ".claude", "projects");
  if (!existsSync(projects)) return false;
  return readdirSync(projects, { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".jsonl"))
    .some((f) => readFileSync(join(projects, f), "utf8").split("\n").some((line) => line.includes('"queue-operation"') && line.includes(text)));
}

async function transcriptHas(s: Setup, runId: string, needle: string): Promise<boolean> {
  const report = await outputs(s, runId);
  const step = report.steps.find((x: any) => x.name === "ask");
  const dir = step?.artifactDir ?? step?.attemptLog?.at(-1)?.artifactDir;
  if (!dir) return false;
  try {
    return readFileSync(join(dir, "transcript.md"), "utf8").includes(needle);
  } catch {
    return false;
  }
}

for (const [how, extra] of [
  ["atomic cancel", []],
  ["Ctrl-C (SIGINT) of atomic run", []],
  ["Ctrl-C (SIGINT) of atomic run on a worker pool", ["--workers", "1"]],
] as const) {
  agentTest(
    `${how} with a long-running Bash tool: no process of the stage is left (the tool's own process group included), SIGTERM before SIGKILL`,
    async () => {
      const s = await setup();
      const started = join(s.cwd, "started");
      const termed = join(s.cwd, "termed");
      const sleep = uniqueSleep();
      s.fake.push(toolUse("Bash", { command: termNotingTool(termed, sleep, started), description: "wait" }));
      // Claude's own tool name passes through unchanged.
      const { proc, out, runId } = await start(s, { prompt: "work", tools: JSON.stringify(["Bash"]) }, [...extra]);
      await untilEvent(waitUntil(() => existsSync(started), AGENT_STEP_LIMIT_MS, "the tool to start"), "the tool to start", { proc, limitMs: AGENT_STEP_LIMIT_MS, describe: describeRun(proc, out, s.fake) });
      const sleepPid = await onlyPid(sleep);
      expect(isLive(sleepPid)).toBe(true);
      if (how.startsWith("atomic cancel")) expect((await runAtomic(["cancel", runId], { home: s.home, env: s.env })).code).toBe(0);
      else proc.kill("SIGINT");
      await proc.exited;
      await waitUntil(() => !isLive(sleepPid) && stageLeftovers(s).length === 0, AGENT_STEP_LIMIT_MS, "every process of the stage to end");
      expect(existsSync(termed)).toBe(true);
      await done(s);
    },
    AGENT_TEST_LIMIT_MS,
  );
}

agentTest(
  "a stage that times out while its run goes on: its Bash tool's processes (a process group of their own) end with it",
  async () => {
    // The stage must time out while its tool runs. A short timeout first (claude reaches its tool in a few
    // seconds); if the stage timed out before the tool started (a busy machine), the attempt proves nothing,
    // is let finish, and the next one gives claude four times as long. Nothing waits on a clock but the stage.
    for (let timeoutMs = 10_000; ; timeoutMs *= 4) {
      const s = await setup();
      const dir = s.cwd;
      const started = join(dir, "started");
      const after = join(dir, "after");
      const sleep = uniqueSleep();
      // Not a command that starts with a long sleep: claude 2.1.332 blocks those ("Blocked: sleep N followed by: …").
      s.fake.push(toolUse("Bash", { command: `cd ${dir}; ${sleep.join(" ")} & touch ${started}; wait`, description: "wait" }));
      const gate = join(dir, "go");
      const { proc, runId } = await start(s, { prompt: "work", tools: JSON.stringify(["Bash"]), timeoutMs, after: `touch ${after}; ${untilExists(gate)}` });
      const toolStarted = () => existsSync(started);
      await waitUntil(() => toolStarted() || existsSync(after), AGENT_STEP_LIMIT_MS, "the tool to start (or the stage to time out first)");
      if (!toolStarted()) {
        expect(timeoutMs).toBeLessThan(AGENT_STEP_LIMIT_MS); // claude never reached its tool, even with the longest timeout
        writeFileSync(gate, "");
        await proc.exited;
        // It timed out (a stage that ended otherwise, say with its tool refused, is not a slow start)
        expect((await stageError(s, runId)).code).toBe("timeout");
        await done(s);
        continue;
      }
      const sleepPid = await onlyPid(sleep);
      await waitUntil(() => existsSync(after), AGENT_STEP_LIMIT_MS, "the stage to time out and the next step to start");
      // The run is still going (its next step waits for us): the timed-out stage's processes are gone already.
      await waitUntil(() => !isLive(sleepPid), AGENT_STEP_LIMIT_MS, "the tool's sleep to end");
      expect(stageLeftovers(s).map(cmdline)).toEqual([]);
      writeFileSync(gate, "");
      expect(await proc.exited).not.toBe(0);
      await done(s);
      return;
    }
  },
  AGENT_TEST_LIMIT_MS,
);

agentTest(
  "resume by session id: a message that comes after claude's stdin was closed resumes the session (--resume); usage is each call's once, however the resumed process counts",
  async () => {
    const s = await setup();
    // The runner in this process, so the message can come in the moment after the turn's end closed stdin.
    s.fake.push(text("first answer", { input: 100, output: 10, cacheRead: 1000 }), text("resumed answer", { input: 7, output: 3 }));
    const dir = makeTempDir("atomic-claude-resume-");
    const events: RunnerEvent[] = [];
    let handle!: RunnerHandle;
    let sent: Promise<void> | undefined;
    const request: StageRequest = {
      runId: "run-resume",
      stageKey: "0",
      stageName: "ask",
      attempt: 1,
      runner: "claude",
      model: MODEL,
      prompt: "first question",
      cwd: dir,
      artifactDir: join(dir, "artifacts"),
      // This process's TMPDIR is not the test's: claude keeps its files in a folder of the test's.
      env: { ...s.env, TMPDIR: dir },
      agent: { binary: agentBin("claude") },
    };
    handle = getRunner("claude").start(request, (e) => {
      events.push(e);
      // The first turn's usage comes with its result, just before stdin is closed: send right after that.
      if (e.type === "usage" && !sent) sent = new Promise((r) => setTimeout(r, 0)).then(() => handle.send("LATE-MESSAGE", "followUp"));
    });
    const r = await handle.result;
    await sent;
    expect(r.error).toBeUndefined();
    expect(r.status).toBe("completed");
    expect(r.text).toBe("resumed answer");
    const started = events.filter((e) => e.type === "started");
    expect(started).toHaveLength(2);
    expect(readFileSync(r.transcriptPath!, "utf8")).toContain(`resuming session ${r.sessionId} with the message`);
    expect(readFileSync(r.errorPath!, "utf8")).toContain(`--resume ${r.sessionId}`);
    const second = s.fake.calls[1]!.body;
    expect(userText(second)).toContain("first question");
    expect(userText(second)).toContain("LATE-MESSAGE");
    // The resumed process's modelUsage starts again at 0 (up to 2.1.276) or at the session's totals (from 2.1.277):
    // either way each call counts once: 100+7 in, 10+3 out; $0.00125 + $0.00011
    expect(r.usage).toMatchObject({ inputTokens: 107, outputTokens: 13, cacheReadTokens: 1000, costMicroUsd: 1360, turns: 2 });
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);

agentTest(
  "continueFrom without the earlier attempt's files (its stage ran on another worker host): the continued stage is charged its own call only",
  async () => {
    const s = await setup();
    const call = { input: 11, output: 7, cacheRead: 100, cacheWrite: 40 };
    s.fake.push(text("noted: 42", call), text("you gave 42", call));
    const dir = makeTempDir("atomic-claude-continue-");
    const stage = (name: string, extra: Partial<StageRequest>) =>
      getRunner("claude").start(
        { runId: "run-continue", stageKey: name, stageName: name, attempt: 1, runner: "claude", model: MODEL, cwd: dir, artifactDir: join(dir, name), env: { ...s.env, TMPDIR: dir }, agent: { binary: agentBin("claude") }, prompt: "", ...extra },
        () => {},
      ).result;
    const first = await stage("first", { prompt: "Remember the number 42." });
    expect(first.status).toBe("completed");
    // The earlier attempt's directory is not here: no session totals to start from.
    const second = await stage("second", { prompt: "Which number did I give you?", continueFrom: { sessionId: first.sessionId!, artifactDir: join(dir, "on-another-host"), fork: false } });
    expect(second.status).toBe("completed");
    expect(userText(s.fake.calls[1]!.body)).toContain("Remember the number 42.");
    // one call: 11 × $5/M + 7 × $25/M + 100 × $0.5/M + 40 × $6.25/M, whether claude's totals went on from the
    // resumed session's (from 2.1.277; 2.1.332 also says what each result added) or started at 0 (2.1.197)
    for (const r of [first, second]) expect(r.usage).toMatchObject({ inputTokens: 11, outputTokens: 7, cacheReadTokens: 100, cacheWriteTokens: 40, costMicroUsd: 530, turns: 1 });
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);

agentTest(
  "a worker whose coordinator is gone ends its running claude stage with the grace period (SIGTERM first), leaving nothing",
  async () => {
    const s = await setup();
    const started = join(s.cwd, "started");
    const termed = join(s.cwd, "termed");
    const sleep = uniqueSleep();
    s.fake.push(toolUse("Bash", { command: termNotingTool(termed, sleep, started), description: "wait" }));
    const { proc } = await start(s, { prompt: "work", tools: JSON.stringify(["Bash"]) }, ["--workers", "1"]);
    await waitUntil(() => existsSync(started), AGENT_STEP_LIMIT_MS, "the tool to start");
    const sleepPid = await onlyPid(sleep);
    const coordinator = processesMatching(s.home, "--internal-pool-coordinator");
    expect(coordinator).toHaveLength(1);
    process.kill(coordinator[0]!, "SIGKILL");
    await waitUntil(() => !isLive(sleepPid) && stageLeftovers(s).length === 0, AGENT_STEP_LIMIT_MS, "every process of the stage to end");
    // The tool's shell had atomic's SIGTERM before anything killed it (termNotingTool says why the note shows it).
    expect(existsSync(termed)).toBe(true);
    proc.kill("SIGKILL");
    await proc.exited;
    await done(s);
  },
  AGENT_TEST_LIMIT_MS,
);
