/**
 * The real codex CLI (0.171.0, test/agents) as an atomic stage through
 * dist/atomic, pointed at a fake OpenAI Responses API (fake-responses.ts)
 * in an isolated CODEX_HOME: text and a tool call, usage exact across turns
 * and resumes (turn.completed is a running total for the thread), cache
 * writes, the model read from codex's config and priced, `atomic send`
 * (followUp queued and delivered by resuming; interrupt ends the turn
 * first), --output-schema, provider errors mapped to the shared codes,
 * a 300 KiB prompt through stdin. Every test checks that codex connected
 * nowhere but the fake.
 */

import { afterAll, expect } from "bun:test";
import { appendFileSync, existsSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { AGENT_TEST_LIMIT_MS, agentBin, agentTest } from "../helpers/agents.ts";
import { getRunner } from "../../src/runners/registry.ts";
import type { StageRequest } from "../../src/runners/types.ts";
import { PRICES, codexHome } from "../helpers/agent-homes.ts";
import { httpError, say, shell, startFakeResponses, streamFailure, type ResponsesReply } from "../helpers/fake-responses.ts";
import { cancelDuringTool, realStages, runStage, sendMidTurn, shownStage } from "../helpers/real-agent-stage.ts";
import { startOtlpReceiver } from "../helpers/otlp-receiver.ts";
import { withinLimit } from "../helpers/heavy.ts";

// codex makes /tmp/codex-daemon-<uid> whatever TMPDIR says; one these tests made (and left empty) goes with them.
const DAEMON_DIR = `/tmp/codex-daemon-${process.getuid?.() ?? 0}`;
const daemonDirWasThere = existsSync(DAEMON_DIR);
afterAll(() => {
  if (!daemonDirWasThere && existsSync(DAEMON_DIR) && readdirSync(DAEMON_DIR).length === 0) rmdirSync(DAEMON_DIR);
});

const setup = realStages<ResponsesReply>(startFakeResponses, codexHome, { runner: "codex" });

/** The user messages codex sent in a request (its own context messages left out). */
const userTexts = (body: any): string[] =>
  (body.input as any[]).filter((i) => i.type === "message" && i.role === "user").flatMap((i) => (i.content as any[]).map((c) => String(c.text ?? "")));

agentTest("codex: a text reply after a tool call; usage exact with cache reads and writes; the model from codex's config, priced", async () => {
  const s = await setup(shell("echo hi > out.txt; echo done", { input: 120, cached: 20, output: 8 }), say(["Hel", "lo"], { input: 300, cached: 200, cacheWrite: 50, output: 20 }));
  const { runId, outputs } = await runStage(s, { prompt: "write out.txt" });
  expect(outputs.status).toBe("completed");
  expect(outputs.text).toBe("Hello");
  expect(readFileSync(join(s.cwd, "out.txt"), "utf8")).toBe("hi\n");
  // input = prompt − cached − written: (120 − 20) + (300 − 200 − 50)
  expect(outputs.usage).toMatchObject({ inputTokens: 150, cacheReadTokens: 220, cacheWriteTokens: 50, outputTokens: 28, turns: 1, model: "m" });
  // priced from the config's table: 150×2 + 28×10 + 220×0.5 + 50×3
  expect(outputs.usage!.costMicroUsd).toBe(840);
  expect(outputs.usage!.unpriced).toBeUndefined();
  // what codex sent: the prompt, its shell tool, the tool's output on the second call
  expect(userTexts(s.fake.calls[0]!.body)).toContain("write out.txt");
  expect((s.fake.calls[0]!.body.tools as any[]).map((t) => t.name)).toContain("exec_command");
  // inside atomic's sandbox (the default for an agent stage) codex's own is off: atomic's confines its shell
  expect(JSON.stringify(s.fake.calls[0]!.body.input)).toContain("`sandbox_mode` is `danger-full-access`");
  expect(JSON.stringify(s.fake.calls[1]!.body.input)).toContain("function_call_output");
  const show = await runAtomic(["show", runId], { home: s.h.home, env: s.h.env });
  expect(show.stdout).toMatch(/150 in \+ 220 cached \+ 50 cache writes, 28 out/);
  s.fake.assertOnlyFake();
});

agentTest("codex: traces on, codex sends its own spans to the same receiver, nested under the stage's invoke_agent span; the receiver's API key reaches codex's exporter, not its command line nor its shell", async () => {
  // a receiver that refuses a request without its key, as a hosted one does
  const key = { name: "x-api-key", value: "otlp-key-codex-7f3a" };
  // codex's shell counts its ancestors (codex among them) with the key on their command line, and looks for it in its own
  // environment; the key is spelled in two halves so that this command's own line does not hold it
  const look =
    'k=otlp-key-; k="${k}codex-7f3a"; p=$$; n=0; while [ "$p" -gt 1 ]; do tr "\\0" " " < /proc/$p/cmdline | grep -q -- "$k" && n=$((n + 1)); p=$(cut -d")" -f2 /proc/$p/stat | cut -d" " -f3); done; ' +
    'echo "command lines with the key: $n, variables with it: $(env | grep -c -- "$k"), private: ${CODEX_TEST_PRIVATE:-unset}"';
  const s = await setup(shell(look, { input: 30, output: 2 }), say(["Hel", "lo"], { input: 30, output: 2 }));
  // the user's own exclusions stay: atomic adds its names to them
  appendFileSync(join(s.h.env.CODEX_HOME!, "config.toml"), '[shell_environment_policy]\nexclude = ["CODEX_TEST_PRIVATE"]\n');
  const otlp = await startOtlpReceiver("127.0.0.1", key);
  try {
    s.h.env.OTEL_EXPORTER_OTLP_ENDPOINT = otlp.url;
    s.h.env.OTEL_EXPORTER_OTLP_HEADERS = `${key.name}=${key.value}`;
    s.h.env.CODEX_TEST_PRIVATE = "private-value";
    // The drive's last flush may wait for this receiver as long as an export may take (else 3 s): on a busy
    // machine a drive starved of CPU needs longer than 3 s to send its last batch. (The stage's span that once
    // never came was in a batch the processor's timer had sent while the run ended: the drive did not wait for
    // its answer and exited without it, silently; otel-setup.ts now waits for it.)
    s.h.env.OTEL_EXPORTER_OTLP_TIMEOUT = "120000";
    const { outputs, stderr } = await runStage(s, { prompt: "say hello" });
    expect(outputs.status).toBe("completed");
    expect(stderr).not.toContain("traces could not be sent");
    // Bounded: a span that never arrives fails the test here instead of holding the lane until the agent-test limit.
    const stage = await withinLimit(otlp.spans.first((x) => x.name === "invoke_agent ask"), 30_000, "the stage's invoke_agent span");
    // codex's spans (its service name, not atomic's) in the run's trace, the outermost a child of the stage's span
    const own = await withinLimit(otlp.spans.first((x) => x.resource["service.name"] !== "atomic" && x.parentSpanId === stage.spanId), 20_000, "a span of codex's under the stage's");
    expect(own.traceId).toBe(stage.traceId);
    expect(otlp.refused).toBe(0);
    expect(JSON.stringify(s.fake.calls[1]!.body.input)).toContain("command lines with the key: 0, variables with it: 0, private: unset");
    s.fake.assertOnlyFake();
  } finally {
    await otlp.close();
  }
});

agentTest("codex: atomic send followUp (with an attached file) is queued until the turn ends, then delivered by resuming the thread; receipt-unverified; usage counted once across the resume", async () => {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const s = await setup({ ...say("first answer", { input: 100, cached: 0, output: 10 }), hold: held }, say("second answer", { input: 250, cached: 100, cacheWrite: 30, output: 15 }));
  writeFileSync(join(s.cwd, "spec.md"), "the docs live in docs/\n");
  const outputs = await sendMidTurn(s, { prompt: "start" }, "also check the docs", "followUp", release, ["--attach", "spec.md"]);
  expect(outputs.status).toBe("completed");
  expect(outputs.text).toBe("second answer");
  expect(s.fake.calls.length).toBe(2);
  // the resumed thread carries the first exchange and the message, with the attached file's copy and contents
  const second = JSON.stringify(s.fake.calls[1]!.body.input);
  expect(second).toContain("first answer");
  const copy = join(s.h.home, "artifacts", outputs.runId, "attachments");
  const [messageDir] = readdirSync(copy);
  const delivered = userTexts(s.fake.calls[1]!.body).at(-1)!;
  expect(delivered.startsWith(`also check the docs\n\nAttached files (1): ${join(copy, messageDir!, "spec.md")}`)).toBe(true);
  expect(delivered).toContain(`<file path="${join(copy, messageDir!, "spec.md")}">\nthe docs live in docs/\n`);
  // codex says nothing of having read a message: the delivery ends receipt-unverified, with why
  const box = JSON.parse((await runAtomic(["inbox", outputs.runId, "--json"], { home: s.h.home, env: s.h.env })).stdout) as { stages: { stage: string; messages: { id: string; state: string; reason: string | null }[] }[] };
  expect(box.stages).toMatchObject([{ stage: "ask", messages: [{ id: messageDir, state: "receipt-unverified", reason: expect.any(String) }] }]);
  // codex reports 350/100/30/25 after the resume (a running total); the stage records each turn once
  expect(outputs.usage).toMatchObject({ inputTokens: 220, cacheReadTokens: 100, cacheWriteTokens: 30, outputTokens: 25, turns: 2, model: "m" });
  s.fake.assertOnlyFake();
});

agentTest("codex: continueFrom without the earlier attempt's files (its stage ran on another worker host): the thread's total before the turn comes from codex's session file; the continued stage is charged its own call only", async () => {
  const call = { input: 157, cached: 100, cacheWrite: 40, output: 7 };
  const s = await setup(say("noted: 42", call), say("you gave 42", call));
  const stage = (name: string, extra: Partial<StageRequest>) =>
    getRunner("codex").start(
      { runId: "run-continue", stageKey: name, stageName: name, attempt: 1, runner: "codex", cwd: s.cwd, artifactDir: join(s.h.dir, name), env: { ...s.h.env, TMPDIR: s.h.dir }, agent: { binary: agentBin("codex"), pricing: PRICES }, prompt: "", ...extra },
      () => {},
    ).result;
  const first = await stage("first", { prompt: "Remember the number 42." });
  expect(first.status).toBe("completed");
  // The earlier attempt's directory is not here: codex's running total (314 input tokens after the second call) has to
  // be taken from the total its session file had when the turn started.
  const second = await stage("second", { prompt: "Which number did I give you?", continueFrom: { sessionId: first.sessionId!, artifactDir: join(s.h.dir, "on-another-host"), fork: false } });
  expect(second.status).toBe("completed");
  expect(JSON.stringify(s.fake.calls[1]!.body.input)).toContain("noted: 42");
  // input = prompt − cached − written; priced from the config's table: 17×2 + 7×10 + 100×0.5 + 40×3
  for (const r of [first, second]) expect(r.usage).toMatchObject({ inputTokens: 17, cacheReadTokens: 100, cacheWriteTokens: 40, outputTokens: 7, costMicroUsd: 274, turns: 1 });
  s.fake.assertOnlyFake();
});

agentTest("codex: atomic send interrupt ends the turn in flight, then resumes the thread with the message", async () => {
  const s = await setup({ ...say("never"), hold: new Promise(() => {}) }, say("replanned", { input: 80, output: 6 }));
  const outputs = await sendMidTurn(s, { prompt: "start" }, "change of plan", "interrupt");
  expect(outputs.status).toBe("completed");
  expect(outputs.text).toBe("replanned");
  expect(userTexts(s.fake.calls.at(-1)!.body).slice(-2)).toEqual(["start", "change of plan"]);
  s.fake.assertOnlyFake();
});

// One codex start for three things none of which changes the others (docs/design/testing.md, session 12).
agentTest("codex: structured output through --output-schema; a 300 KiB prompt goes through stdin; tools: [] leaves codex no shell", async () => {
  const s = await setup(say('{"verdict":"ok","score":3}'));
  const prompt = `review this: ${"x".repeat(300 * 1024)}`;
  const { outputs } = await runStage(s, { prompt, structured: true, tools: JSON.stringify([]) });
  expect(outputs.status).toBe("completed");
  expect(outputs.structured).toEqual({ verdict: "ok", score: 3 });
  const body = s.fake.calls[0]!.body;
  expect(body.text.format.type).toBe("json_schema");
  expect(Object.keys(body.text.format.schema.properties)).toEqual(["verdict", "score"]);
  expect(userTexts(body)).toContain(prompt);
  expect((body.tools as any[]).map((t) => t.name ?? t.type)).not.toContain("exec_command");
  expect((body.tools as any[]).map((t) => t.name ?? t.type)).not.toContain("web_search");
  s.fake.assertOnlyFake();
});

for (const [name, replies, code, words] of [
  ["401", [httpError(401, "Incorrect API key provided"), httpError(401, "Incorrect API key provided")], "provider_auth", /codex: the provider refused the API key \(HTTP 401\).*Incorrect API key provided/],
  ["400", [httpError(400, "Unsupported parameter: foo")], "provider_bad_request", /codex: the provider refused the request.*Unsupported parameter: foo/],
  ["429 with Retry-After", [httpError(429, "Rate limit reached for m", { "retry-after": "1" }, "rate_limit_error"), httpError(429, "Rate limit reached for m", { "retry-after": "1" }, "rate_limit_error")], "provider_rate_limit", /codex: rate limited by the provider \(HTTP 429\)/],
  ["500", Array<ResponsesReply>(8).fill(httpError(500, "boom", {}, "server_error")), "provider_unavailable", /codex: the provider is unavailable: .*high demand/], // codex puts its own words in place of a 500's
  ["an error inside the stream", [streamFailure("The model crashed mid-way"), streamFailure("The model crashed mid-way")], "provider_unavailable", /codex: the provider's reply broke off: .*The model crashed mid-way/],
] as const) {
  agentTest(`codex: provider error ${name} fails the stage as ${code}, naming codex, its exit status and the provider's words`, async () => {
    const s = await setup(...replies);
    const { outputs } = await runStage(s, { prompt: "hi" });
    expect(outputs.status).toBe("failed");
    expect(outputs.error!.code).toBe(code);
    expect(outputs.error!.message).toMatch(words);
    expect(outputs.error!.message).toMatch(/\(codex exited with status \d+\)$/);
    s.fake.assertOnlyFake();
  });
}

agentTest("codex: a 500 that codex's own retry survives: its 'Reconnecting...' error record is not final, the stage completes", async () => {
  const s = await setup(httpError(500, "boom", {}, "server_error"), say("recovered", { input: 40, output: 4 }));
  const { outputs } = await runStage(s, { prompt: "hi" });
  expect(outputs.status).toBe("completed");
  expect(outputs.text).toBe("recovered");
  expect(outputs.usage).toMatchObject({ inputTokens: 40, outputTokens: 4 });
  expect(s.fake.calls.length).toBe(2);
  s.fake.assertOnlyFake();
});

agentTest("codex: tools in atomic's terms: read-only tools give a read-only sandbox", async () => {
  const s = await setup(say("looked"), say("looked again"));
  const readOnly = await runStage(s, { prompt: "look", tools: JSON.stringify(["read", "grep", "list"]) });
  expect(readOnly.outputs.status).toBe("completed");
  // without atomic's sandbox, codex's own: read-only, or workspace-write with a writing tool
  const unboxedRun = await runStage(s, { prompt: "look", tools: JSON.stringify(["read", "grep", "list"]), sandbox: JSON.stringify("off") });
  expect(unboxedRun.outputs.status).toBe("completed");
  const [boxed, unboxed] = s.fake.calls.map((c) => c.body);
  // inside atomic's sandbox codex's own is off (the cwd is read-only there: the next test); outside, codex tells the
  // model its permissions: no write access to the cwd in its read-only sandbox
  expect(JSON.stringify(boxed.input)).toContain("`sandbox_mode` is `danger-full-access`");
  expect(JSON.stringify(unboxed.input)).toContain("`sandbox_mode` is `read-only`");
  expect(JSON.stringify(unboxed.input)).not.toContain(`<entry access=\\"write\\"><path>${s.cwd}</path>`);
  expect((boxed.tools as any[]).map((t) => t.name)).toContain("exec_command");
  s.fake.assertOnlyFake();
});

agentTest("codex: a write in the read-only sandbox (tools without write, edit or bash) is a warning on the stage naming the command (transcript and show)", async () => {
  // a command that runs a moment: codex 0.171 reports no item in --json for a command that ends at once (seen under load)
  const s = await setup(shell("sleep 1; echo hi > out.txt"), say("could not"));
  const { runId, outputs } = await runStage(s, { prompt: "write out.txt", tools: JSON.stringify(["read"]) });
  expect(outputs.status).toBe("completed");
  expect(existsSync(join(s.cwd, "out.txt"))).toBe(false);
  const seen = await shownStage(s.h.home, s.h.env, runId, "ask");
  const events = readFileSync(join(seen.dir, "events.jsonl"), "utf8");

  const warning = /codex refused the tool exec_command \(\{"cmd":".*echo hi > out.txt.*"\}\): its read-only sandbox refused a write \(Read-only file system\); hint: name it in the stage's tools to allow it, e.g. tools: \["read","write"\]/;
  expect(seen.show, `codex's events: ${events}`).toMatch(new RegExp(`warning: ${warning.source}`));
  expect(seen.transcript).toMatch(new RegExp(`## Warning\\s+${warning.source}`));
  s.fake.assertOnlyFake();
});

for (const how of ["cancel", "SIGINT"] as const) {
  agentTest(
    `codex: ${how === "cancel" ? "atomic cancel" : "Ctrl-C (SIGINT) of atomic run"} with a long-running shell tool: the tool's processes end (in codex's pid namespace, with it)`,
    async () => {
      const s = await setup();
      await cancelDuringTool(s, (command) => shell(command), how, false);
      s.fake.assertOnlyFake();
    },
    AGENT_TEST_LIMIT_MS,
  );
}
