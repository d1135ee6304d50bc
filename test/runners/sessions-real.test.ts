/**
 * continueFrom and fork with the real claude and codex CLIs (test/agents)
 * through dist/atomic, against their fake providers: a continued stage's
 * model call carries the earlier stage's conversation (claude --resume,
 * codex exec resume), a fork starts from the earlier session under a new
 * id and leaves it as it was (claude --fork-session, codex exec fork), a
 * continuation of a continuation carries the whole chain; output: "file"
 * keeps the answer in the attempt's output.md. The same with opencode
 * (-s, --fork) and pi (a copy of the earlier session file) against the
 * fake Chat Completions provider. Every stage here runs in a sandbox (the
 * config's `sandbox: true`): each CLI's state directory is writable
 * inside, so its sessions last from one stage to the next; the same
 * resumes without a sandbox: the *-real tests of each CLI. A pi stage
 * continued or forked without naming its runner inherits pi, its model and
 * its (relative) cwd, in a workflow whose default runner is shell. (Naming
 * another runner is refused with both named, before that stage starts
 * anything: the engine's check, whatever the runner, through the binary in
 * test/sdk/stage-options.test.ts; here it cost a pi start of its own.)
 *
 * Usage through sessions: every call of the fake answers the same usage,
 * so each stage's usage is exactly one call's, whichever way its CLI counts
 * (per call, per process, or running totals that go on across resumes and
 * forks: claude from 2.1.277, codex), in show, runs, usage (the cost page's
 * API), the page itself in Chromium (the cost page and the run's page,
 * helpers/usage-page.ts) and the budget (caps one token and one micro-dollar above the run's
 * true spending are never reached). Run against the newest CLIs with
 * ATOMIC_TEST_AGENTS (test/helpers/agents.ts).
 */

import { existsSync, mkdirSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect } from "bun:test";
import { runAtomic } from "../helpers/atomic.ts";
import { AGENT_TEST_LIMIT_MS, agentTest } from "../helpers/agents.ts";
import { claudeHome, codexHome, geminiHome, inputsFile } from "../helpers/agent-homes.ts";
import { text } from "../helpers/fake-anthropic.ts";
import { say, startFakeResponses } from "../helpers/fake-responses.ts";
import { startFakeOpenAI, text as chatText, type FakeOpenAI, type RecordedRequest } from "../helpers/fake-openai.ts";
import { chatAgentSetup, MODEL, startNetworkTrap } from "../helpers/chat-agents.ts";
import { say as geminiSay, startFakeGemini } from "../helpers/fake-gemini.ts";
import { startFakeAnthropic } from "../helpers/fake-anthropic.ts";
import { realStages, type RealStage } from "../helpers/real-agent-stage.ts";
import { capsAbove, expectRunUsage, times, type Ledger } from "../helpers/usage-sums.ts";
import { expectPageUsage } from "../helpers/usage-page.ts";
import { releaseBrowser } from "../status/browser-support.ts";

const WORKFLOW = join(import.meta.dir, "..", "sdk", "fixtures", "sessions.ts");
const INHERIT = join(import.meta.dir, "..", "sdk", "fixtures", "inherit.ts");
/** In the order of the stages: first, forked, second, third, filed. */
const ANSWERS = ["noted: 42", "bye", "you gave 42", "still 42", "# The report\nall good\n"];
const STAGES = ["first", "forked", "second", "third", "filed"];

/**
 * What each call of the fakes answers, and one call in atomic's ledger: input excludes cache reads and
 * writes; claude prices its calls from its own table, for a model it names (CLAUDE_MODEL: its default
 * model changes with its version, and its prices with it); from the config's (agent-homes.ts PRICES) for codex and gemini, from the CLI's models file (chat-agents.ts:
 * 1 in, 2 out, 0.5 cache read) for opencode and pi.
 */
const CALL = {
  claude: { input: 11, cacheRead: 100, cacheWrite: 40, output: 7 },
  codex: { input: 157, cached: 100, cacheWrite: 40, output: 7 },
  gemini: { prompt: 117, cached: 100, output: 7 },
  chat: { prompt: 117, cached: 100, completion: 7 },
};
const LEDGER: Record<string, Ledger> = {
  // 11 × $5/M + 100 × $0.5/M + 40 × $6.25/M + 7 × $25/M
  claude: { inputTokens: 11, cacheReadTokens: 100, cacheWriteTokens: 40, outputTokens: 7, costMicroUsd: 55 + 50 + 250 + 175 },
  codex: { inputTokens: 17, cacheReadTokens: 100, cacheWriteTokens: 40, outputTokens: 7, costMicroUsd: 34 + 50 + 120 + 70 },
  gemini: { inputTokens: 17, cacheReadTokens: 100, cacheWriteTokens: 0, outputTokens: 7, costMicroUsd: 17 + 25 + 28 },
  chat: { inputTokens: 17, cacheReadTokens: 100, cacheWriteTokens: 0, outputTokens: 7, costMicroUsd: 17 + 50 + 14 },
};

const DAEMON_DIR = `/tmp/codex-daemon-${process.getuid?.() ?? 0}`;
const daemonDirWasThere = existsSync(DAEMON_DIR);
afterAll(async () => {
  await releaseBrowser();
  if (!daemonDirWasThere && existsSync(DAEMON_DIR) && readdirSync(DAEMON_DIR).length === 0) rmdirSync(DAEMON_DIR);
});

/** A model the pinned claude (2.1.197) and 2.1.332 both price from their tables at the same list prices. */
const CLAUDE_MODEL = "claude-opus-4-8";
const claude = realStages(startFakeAnthropic, claudeHome, { runner: "claude", model: CLAUDE_MODEL });
const codex = realStages(startFakeResponses, codexHome, { runner: "codex" });
const gemini = realStages(startFakeGemini, geminiHome, { runner: "gemini", model: "gemini-2.5-flash" });

async function runSessions(s: RealStage<any>, each: Ledger, extra: Record<string, unknown> = {}) {
  sandboxed(s.h.home);
  const args = ["run", WORKFLOW, "--json", "--workers", "1", ...capsAbove(times(each, STAGES.length)), "--inputs-json", inputsFile(s.h, { ...s.defaults, ...extra })];
  const r = await runAtomic(args, { home: s.h.home, cwd: s.cwd, env: s.h.env, timeoutMs: AGENT_TEST_LIMIT_MS });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const end = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
  await expectRunUsage(s.h.home, end.runId, STAGES, each);
  await expectPageUsage(s.h.home, end.runId, "sessions", STAGES, each, s.h.env);
  return end.outputs as { texts: string[]; sessions: string[]; filed: { text: string; path: string; content: string } };
}

/** The atomic home's config with `sandbox: true`: every stage of the run sandboxed. */
function sandboxed(home: string): void {
  const file = join(home, "config.json");
  writeFileSync(file, JSON.stringify({ ...(existsSync(file) ? JSON.parse(readFileSync(file, "utf8")) : {}), sandbox: true }));
}

/** Checks what every model call carried, given each call's user and assistant texts in order. */
function expectChains(calls: string[][]) {
  const [first, forked, second, third] = calls;
  expect(first).toEqual(["Remember the number 42."]);
  expect(second).toEqual(["Remember the number 42.", "noted: 42", "Which number did I give you?"]);
  expect(forked).toEqual(["Remember the number 42.", "noted: 42", "Forget it; say bye."]);
  expect(third).toEqual(["Remember the number 42.", "noted: 42", "Which number did I give you?", "you gave 42", "And once more?"]);
}

function expectOutputs(out: Awaited<ReturnType<typeof runSessions>>) {
  expect(out.texts).toEqual(["noted: 42", "you gave 42", "bye", "still 42"]);
  const [first, second, forked, third] = out.sessions;
  expect(second).toBe(first); // continued: the same session
  expect(third).toBe(first);
  expect(forked).not.toBe(first); // forked: a new one
  expect(out.filed.text).toBe("");
  expect(out.filed.path).toMatch(/\/attempt-1\/output\.md$/);
  expect(out.filed.content).toBe(ANSWERS[4]!);
}

const KNOWN = new Set(["Remember the number 42.", "Which number did I give you?", "Forget it; say bye.", "And once more?", ...ANSWERS]);

agentTest("claude: continueFrom resumes the earlier session (--resume), fork branches it (--fork-session)", async () => {
  const s = await claude(...ANSWERS.map((a) => text(a, CALL.claude)));
  const out = await runSessions(s, LEDGER.claude!);
  expectOutputs(out);
  // claude's messages: content blocks, with its own reminders among them: keep the workflow's texts
  const texts = (body: any) =>
    (body.messages as any[]).flatMap((m) => (typeof m.content === "string" ? [m.content] : (m.content as any[]).map((b) => String(b.text ?? "")))).map((t) => t.trim()).filter((t) => KNOWN.has(t));
  expectChains(s.fake.calls.slice(0, 4).map((c) => texts(c.body)));
  s.fake.assertOnlyFake();
});

agentTest("codex: continueFrom resumes the thread (exec resume), fork branches it (exec fork)", async () => {
  const s = await codex(...ANSWERS.map((a) => say(a, CALL.codex)));
  const out = await runSessions(s, LEDGER.codex!);
  expectOutputs(out);
  const texts = (body: any) =>
    (body.input as any[]).filter((i) => i.type === "message").flatMap((i) => (i.content as any[]).map((c) => String(c.text ?? "").trim())).filter((t) => KNOWN.has(t));
  expectChains(s.fake.calls.slice(0, 4).map((c) => texts(c.body)));
  s.fake.assertOnlyFake();
});

// opencode and pi against the fake Chat Completions provider (their own isolation: helpers/chat-agents.ts).
const trap = startNetworkTrap();
const servers: FakeOpenAI[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.close()));
  trap.stop();
  expect(trap.strays).toEqual([]);
});

const PROMPTS: Record<string, string> = {
  "Remember the number 42.": ANSWERS[0]!,
  "Forget it; say bye.": ANSWERS[1]!,
  "Which number did I give you?": ANSWERS[2]!,
  "And once more?": ANSWERS[3]!,
  "Write the report.": ANSWERS[4]!,
};
const partsText = (content: unknown) => (typeof content === "string" ? content : ((content as { text?: string }[] | null) ?? []).map((p) => p.text ?? "").join(""));

for (const kind of ["opencode", "pi"] as const) {
  agentTest(`${kind}: continueFrom continues the earlier session, fork branches it (${kind === "pi" ? "a copy of its session file" : "-s with --fork"})`, async () => {
    const server = await startFakeOpenAI((req) => {
      const ask = partsText(req.body.messages.filter((m) => m.role === "user").at(-1)?.content).trim();
      return PROMPTS[ask] ? chatText(PROMPTS[ask], CALL.chat) : chatText("A title", { prompt: 0, completion: 0 }); // a call that is no stage's work, if the CLI made one
    });
    servers.push(server);
    const s = chatAgentSetup(kind, server.url, { trap });
    sandboxed(s.home);
    const inputs = join(s.home, `inputs-${kind}.json`); // beside the run, not in the agent's cwd
    writeFileSync(inputs, JSON.stringify({ runner: kind, model: MODEL }));
    const r = await runAtomic(["run", WORKFLOW, "--json", "--workers", "1", ...capsAbove(times(LEDGER.chat!, STAGES.length)), "--inputs-json", inputs], { home: s.home, cwd: s.cwd, env: s.env, timeoutMs: AGENT_TEST_LIMIT_MS });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const end = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
    await expectRunUsage(s.home, end.runId, STAGES, LEDGER.chat!);
    await expectPageUsage(s.home, end.runId, "sessions", STAGES, LEDGER.chat!, s.env);
    const out = end.outputs;
    expect(out.texts).toEqual(["noted: 42", "you gave 42", "bye", "still 42"]);
    if (kind === "opencode") {
      expect(out.sessions[1]).toBe(out.sessions[0]);
      expect(out.sessions[2]).not.toBe(out.sessions[0]);
    }
    expect(out.filed).toMatchObject({ text: "", content: ANSWERS[4] });
    const texts = (req: RecordedRequest) => req.body.messages.map((m) => partsText(m.content).trim()).filter((t) => KNOWN.has(t));
    const stageCalls = server.requests.filter((q) => Object.hasOwn(PROMPTS, partsText(q.body.messages.filter((m) => m.role === "user").at(-1)?.content).trim()));
    expectChains(stageCalls.slice(0, 4).map(texts));
  });
}

agentTest("pi: continueFrom and fork without runner inherit pi, its model and cwd from the earlier stage", async () => {
  const server = await startFakeOpenAI((req) => chatText(PROMPTS[partsText(req.body.messages.filter((m) => m.role === "user").at(-1)?.content).trim()] ?? "unexpected"));
  servers.push(server);
  const s = chatAgentSetup("pi", server.url, { trap });
  mkdirSync(join(s.cwd, "sub"));
  // The workflow's default runner is shell and only the first stage names pi and its model: the others inherit both.
  const inputs = join(s.home, "inputs-inherit.json"); // beside the run, not in the agent's cwd
  writeFileSync(inputs, JSON.stringify({ runner: "pi", model: MODEL }));
  const r = await runAtomic(["run", INHERIT, "--json", "--workers", "1", "--inputs-json", inputs], { home: s.home, cwd: s.cwd, env: s.env, timeoutMs: AGENT_TEST_LIMIT_MS });
  expect({ stderr: r.stderr, code: r.code, out: r.stdout.slice(-2000) }).toMatchObject({ stderr: "", code: 0 });
  const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs;
  expect(out.texts).toEqual(["noted: 42", "you gave 42", "bye"]);
  expect(out.ran).toEqual(["pi", MODEL, "sub", "pi", MODEL, "sub"]);
  // Every model call came from pi with the first stage's model, the continued ones carrying the earlier conversation.
  expect(server.requests.map((q) => q.body.model)).toEqual(["m", "m", "m"]);
  const texts = (req: RecordedRequest) => req.body.messages.map((m) => partsText(m.content).trim()).filter((t) => KNOWN.has(t));
  expect(server.requests.map(texts)).toEqual([
    ["Remember the number 42."],
    ["Remember the number 42.", "noted: 42", "Which number did I give you?"],
    ["Remember the number 42.", "noted: 42", "Which number did I give you?", "you gave 42", "Forget it; say bye."],
  ]);
  // pi ran in the first stage's cwd each time: its system prompt names it.
  for (const q of server.requests) expect(JSON.stringify(q.body.messages[0])).toContain(join(s.cwd, "sub"));
});

agentTest("gemini: continueFrom resumes the session (-r); a fork is refused before the stage starts, in one sentence", async () => {
  const s = await gemini(...[0, 2, 3, 4].map((i) => geminiSay(ANSWERS[i]!, CALL.gemini)));
  sandboxed(s.h.home);
  const stages = STAGES.filter((n) => n !== "forked");
  const r = await runAtomic(["run", WORKFLOW, "--json", "--workers", "1", ...capsAbove(times(LEDGER.gemini!, stages.length)), "--inputs-json", inputsFile(s.h, { ...s.defaults, bad: "no-fork" })], { home: s.h.home, cwd: s.cwd, env: s.h.env, timeoutMs: AGENT_TEST_LIMIT_MS });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const end = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
  await expectRunUsage(s.h.home, end.runId, stages, LEDGER.gemini!);
  await expectPageUsage(s.h.home, end.runId, "sessions", stages, LEDGER.gemini!, s.h.env);
  const out = end.outputs;
  expect(out.texts).toEqual(["noted: 42", "you gave 42", null, "still 42"]);
  expect(out.sessions[1]).toBe(out.sessions[0]);
  const texts = (body: any) => (body.contents as any[]).flatMap((c) => (c.parts as any[]).map((p) => String(p.text ?? "").trim())).filter((t) => KNOWN.has(t));
  const [first, second, third] = s.fake.calls.slice(0, 3).map((c) => texts(c.body));
  expect(first).toEqual(["Remember the number 42."]);
  expect(second).toEqual(["Remember the number 42.", "noted: 42", "Which number did I give you?"]);
  expect(third).toEqual(["Remember the number 42.", "noted: 42", "Which number did I give you?", "you gave 42", "And once more?"]);
  const calls = s.fake.calls.length;
  const refused = await runAtomic(["run", WORKFLOW, "--workers", "1", "--inputs-json", inputsFile(s.h, s.defaults)], { home: s.h.home, cwd: s.cwd, env: s.h.env, timeoutMs: AGENT_TEST_LIMIT_MS });
  expect(refused.code).toBe(1);
  // The sentence names the call site in the workflow file (" (at sessions.ts:17:73)").
  expect(refused.stderr).toMatch(/failed: stage "forked": the gemini runner cannot fork a session \(at [^)]*sessions\.ts:\d+:\d+\)\nhint: leave fork out to continue the session itself\n/);
  expect(s.fake.calls.length).toBe(calls + 1); // only the first stage's call
  s.fake.assertOnlyFake();
});
