/**
 * The run tools through the stage MCP server with a real agent CLI (test/agents,
 * pinned versions) against its fake provider (docs/design/stage-tools.md):
 * claude calls mcp__atomic__message to a misspelt stage (refused, "did you
 * mean", nothing recorded), then to a stage that has not started yet;
 * the stage MCP server carries it to the run's driver, the tool's result
 * reaches the model, and the next stage reads the message on its stdin;
 * claude asks an openai sibling, and a misspelt one and one that does not answer
 * in time (one sentence each); codex asks a claude sibling (ask_agent
 * between two real CLIs, the reply through claude's own stage MCP server);
 * claude and pi ask the person (ask_user): the call tells the CLI to end
 * its turn, the stage parks with the CLI gone, the root is killed, the
 * answer resumes the CLI's session;
 * opencode messages; pi messages and asks an openai sibling through
 * atomic's pi extension (pi has no MCP client); gemini, through the server
 * in a gemini home of the stage's own, messages from a sandbox, asks the
 * person across a kill -9 and asks an openai sibling, the user's
 * settings.json (with comments) byte for byte as it was.
 */

import { afterAll, afterEach, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { AGENT_TEST_LIMIT_MS, agentBin, agentTest } from "../helpers/agents.ts";
import { PRICES, claudeHome, codexHome, geminiHome, type AgentHome } from "../helpers/agent-homes.ts";
import { say as geminiSay, startFakeGemini, type GeminiReply } from "../helpers/fake-gemini.ts";
import type { LoggedRequest } from "../helpers/fake-provider.ts";
import { startFakeResponses, say } from "../helpers/fake-responses.ts";
import { startFakeAnthropic, text, toolUse } from "../helpers/fake-anthropic.ts";
import { startFakeOpenAI, text as oaText, toolCall as oaToolCall } from "../helpers/fake-openai.ts";
import { chatAgentSetup, startNetworkTrap } from "../helpers/chat-agents.ts";
import { kill9, runIdOf, startService, untilStatus } from "../service/support.ts";
import { cleanupNow, cleanupWhenIdle, parseNdjson } from "../e2e/support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

async function runFixture(h: AgentHome, runner: string, mode = "message", env: Record<string, string> = {}, answerer = "openai", timeoutMs = AGENT_TEST_LIMIT_MS, sandbox = false) {
  const args = ["run", join(import.meta.dir, "fixtures", "cli-run-tools.ts"), "--json", "--input", `runner=${runner}`, "--input", `mode=${mode}`, "--input", `answerer=${answerer}`, "--input", `sandbox=${sandbox}`];
  const r = await runAtomic(args, { home: h.home, env: { ...h.env, ...env }, timeoutMs });
  return { r, result: parseNdjson(r.stdout).at(-1) as { outputs?: Record<string, string> } };
}

agentTest("claude in a sandbox: message to a misspelt stage is refused (did you mean), then to a stage not started yet, through the stage MCP server (inside the sandbox, the broker's socket shown to it)", async () => {
  const fake = await startFakeAnthropic();
  try {
    fake.push(toolUse("mcp__atomic__message", { to: "raeder", text: "to a typo" }), toolUse("mcp__atomic__message", { to: "reader", text: "the secret is 42" }), text("told the reader"));
    const h = claudeHome(fake);
    const { r, result } = await runFixture(h, "claude", "message", {}, "openai", AGENT_TEST_LIMIT_MS, true);
    expect(r.code).toBe(0);
    expect(result.outputs).toEqual({ writer: "told the reader", reader: "the secret is 42\n" });
    // The misspelt name was refused to the model, naming the close match of the workflow's stages; nothing was recorded.
    const runId = (result as { runId?: string }).runId!;
    expect(JSON.stringify(fake.calls[1]!.body.messages)).toContain(`error: run ${runId} has no stage raeder: no stage of its workflow is named raeder (hint: did you mean: reader)`);
    const inbox = JSON.parse((await runAtomic(["inbox", runId, "--json"], { home: h.home, env: h.env })).stdout) as { stages: { stage: string; messages: { text: string }[] }[] };
    expect(inbox.stages.flatMap((s) => s.messages.map((m) => `${s.stage}: ${m.text}`))).toEqual(["reader: the secret is 42"]);
    // The tool's result (where the message went) reached the model as claude's tool_result.
    const second = JSON.stringify(fake.calls[2]!.body.messages);
    expect(second).toContain("sent to reader (queued until it starts)");
    // The tools claude was offered include the stage MCP server's, under claude's MCP naming.
    expect(JSON.stringify(fake.calls[0]!.body.tools)).toContain("mcp__atomic__message");
    fake.assertOnlyFake();
  } finally {
    await fake.close();
  }
});

agentTest("opencode: message to a stage not started yet, through the stage MCP server (its tool atomic_message)", async () => {
  const trap = startNetworkTrap();
  const openai = await startFakeOpenAI((req) =>
    req.body.messages.some((m) => m.role === "tool") ? oaText("told the reader") : oaToolCall("atomic_message", { to: "reader", text: "the secret is 42" }),
  );
  try {
    const s = chatAgentSetup("opencode", openai.url, { trap });
    const { r, result } = await runFixture({ home: s.home, dir: s.cwd, env: s.env }, "opencode", "message", {}, "openai", 150_000);
    expect(r.code).toBe(0);
    expect(result.outputs).toEqual({ writer: "told the reader", reader: "the secret is 42\n" });
    const last = openai.requests.at(-1)!.body.messages;
    expect(JSON.stringify(last.filter((m) => m.role === "tool"))).toContain("sent to reader (queued until it starts)");
    expect(JSON.stringify(openai.requests[0]!.body.tools)).toContain("atomic_message");
    expect(trap.strays).toEqual([]);
  } finally {
    trap.stop();
    await openai.close();
  }
});

agentTest("pi in a sandbox: message to a stage not started yet, through atomic's pi extension (its tool message; the credential not in pi's shell)", async () => {
  const trap = startNetworkTrap();
  // The first turn messages the reader and runs a shell command printing whether the stage's link reached pi's shell.
  const openai = await startFakeOpenAI((req) => {
    const results = req.body.messages.filter((m) => m.role === "tool");
    if (results.length === 0) return { toolCalls: [{ id: "m1", name: "message", arguments: { to: "reader", text: "the secret is 42" } }, { id: "b1", name: "bash", arguments: { command: "echo link=${ATOMIC_STAGE_TOOLS:-none}" } }] };
    return oaText("told the reader");
  });
  try {
    const s = chatAgentSetup("pi", openai.url, { trap });
    const { r, result } = await runFixture({ home: s.home, dir: s.cwd, env: s.env }, "pi", "message", {}, "openai", 150_000, true);
    expect(r.code).toBe(0);
    expect(result.outputs).toEqual({ writer: "told the reader", reader: "the secret is 42\n" });
    const tools = JSON.stringify(openai.requests.at(-1)!.body.messages.filter((m) => m.role === "tool"));
    expect(tools).toContain("sent to reader (queued until it starts)");
    expect(tools).toContain("link=none");
    expect(openai.requests[0]!.body.tools!.map((t) => t.function.name)).toContain("message");
    expect(trap.strays).toEqual([]);
  } finally {
    trap.stop();
    await openai.close();
  }
});

/** The gemini user's settings, with comments and an MCP allow-list of their own; the test checks the file is untouched. */
function geminiUserSettings(h: AgentHome): { file: string; text: string } {
  const file = join(h.env.HOME!, ".gemini", "settings.json");
  const text = [
    "{",
    "  // API-key auth: GOOGLE_GEMINI_BASE_URL needs it",
    '  "security": { "auth": { "selectedType": "gemini-api-key" } },',
    '  "privacy": { "usageStatisticsEnabled": false }, /* no statistics */',
    '  "general": { "enableAutoUpdate": false, "enableAutoUpdateNotification": false },',
    '  "telemetry": { "enabled": false },',
    "  // only these MCP servers: atomic lets its own through for the stage",
    '  "mcp": { "allowed": ["docs"] }',
    "}",
    "",
  ].join("\n");
  writeFileSync(file, text);
  return { file, text };
}

/** The names of the functions gemini offered the model in a request. */
const geminiTools = (body: any): string[] => (body.tools as any[]).flatMap((t) => (t.functionDeclarations ?? []).map((f: any) => f.name));

agentTest("gemini in a sandbox: message to a stage not started yet, through the stage MCP server in its own gemini home (the user's settings.json untouched)", async () => {
  const fake = await startFakeGemini();
  try {
    fake.push({ calls: [{ name: "mcp_atomic_message", args: { to: "reader", text: "the secret is 42" } }] }, geminiSay("told the reader"));
    const h = geminiHome(fake);
    const settings = geminiUserSettings(h);
    const { r, result } = await runFixture(h, "gemini", "message", {}, "openai", AGENT_TEST_LIMIT_MS, true);
    expect(r.code).toBe(0);
    expect(result.outputs).toEqual({ writer: "told the reader", reader: "the secret is 42\n" });
    expect(geminiTools(fake.calls[0]!.body)).toContain("mcp_atomic_message");
    expect(JSON.stringify(fake.calls[1]!.body.contents)).toContain("sent to reader (queued until it starts)");
    expect(readFileSync(settings.file, "utf8")).toBe(settings.text);
    fake.assertOnlyFake();
  } finally {
    await fake.close();
  }
});

test("gemini with a settings.json that is not JSON: the stage granted a run tool fails in one sentence with a hint, before gemini starts; the file untouched", async () => {
  const fake = await startFakeGemini();
  const h = geminiHome(fake);
  const file = join(h.env.HOME!, ".gemini", "settings.json");
  writeFileSync(file, '{ "security": { "auth": ');
  writeFileSync(join(h.home, "config.json"), JSON.stringify({ runners: { gemini: { path: "/bin/false" } } }));
  const { r, result } = await runFixture(h, "gemini", "message", {}, "openai", 60_000).finally(() => fake.close());
  expect(r.code).toBe(1);
  expect(fake.requests).toEqual([]);
  const error = (result as { error?: { code: string; message: string } }).error!;
  expect(error.code).toBe("bad_config");
  expect(error.message).toMatch(/^stage "writer" failed: gemini's settings file .*\/\.gemini\/settings\.json cannot be read as JSON with comments \(.+\), so atomic cannot add the stage's run tools to it; fix the file \(gemini reads it too\), or leave ask_user, message and ask_agent out of this stage's tools$/);
  expect(readFileSync(file, "utf8")).toBe('{ "security": { "auth": ');
});

/** The asker's model: asks once; told to end its turn, ends it; given the answer as the next message, goes on with it. */
function askerTurn(conversation: string): "ask" | "wait" | { answer: string } {
  const answer = /The person answered your question: ([a-z]+)/.exec(conversation)?.[1];
  if (answer) return { answer };
  return conversation.includes("waits for a person") ? "wait" : "ask";
}

/**
 * The asker asks the person through its CLI; the call is answered at once and the CLI ends its turn; the stage
 * parks (the CLI gone); the root is killed (-9); `atomic answer` with the service running; the stage resumes the
 * CLI's session with the answer. The model is called three times in all: nothing before the question is redone.
 */
async function askUserAcrossKill(h: AgentHome, runner: string, calls: () => number) {
  const s = { home: h.home, sideFile: "", gateFile: "" };
  const service = startService(s, [], h.env);
  try {
    await service.log.waitFor(/"type":"service_active"/);
    const proc = spawnAtomic(["--home", h.home, "--json", "run", join(import.meta.dir, "fixtures", "cli-run-tools.ts"), "--input", `runner=${runner}`, "--input", "mode=user"], { home: h.home, env: h.env });
    const out = lineWatcher(proc.stdout);
    const runId = await runIdOf(out);
    await out.waitFor(/Deploy to production\?/);
    // Parked: the attempt that asked has ended (its CLI with it) before the question was recorded.
    expect(calls()).toBe(2);
    await kill9(proc);
    const inbox = JSON.parse((await runAtomic(["--home", h.home, "--json", "inbox", runId], { home: h.home, env: h.env })).stdout);
    expect(inbox.prompts.map((p: { question: string; choices: string[]; state: string }) => [p.question, p.choices, p.state])).toEqual([["Deploy to production?", ["yes", "no"], "open"]]);
    expect((await runAtomic(["--home", h.home, "answer", runId, inbox.prompts[0].id, "yes"], { home: h.home, env: h.env })).code).toBe(0);
    const done = await untilStatus(s, runId, "completed", 120_000);
    expect(done.run.outputs).toEqual({ asker: "deploying: yes" });
    expect(calls()).toBe(3);
  } finally {
    service.proc.kill("SIGTERM");
    await service.proc.exited;
  }
}

agentTest(
  "claude asks the person (ask_user through the stage MCP server): the CLI ends its turn and the stage parks; kill -9 of the root; atomic answer: claude's session resumes with the answer",
  async () => {
    const fake = await startFakeAnthropic();
    const reply = (req: { body: { messages: unknown[] } }) => {
      const turn = askerTurn(JSON.stringify(req.body.messages));
      if (turn === "ask") return toolUse("mcp__atomic__ask_user", { question: "Deploy to production?", choices: ["yes", "no"] });
      return text(turn === "wait" ? "waiting for the person" : `deploying: ${turn.answer}`);
    };
    fake.push(...Array.from({ length: 3 }, () => reply));
    try {
      await askUserAcrossKill(claudeHome(fake), "claude", () => fake.calls.length);
      // The last call is the same conversation: the question, its result, then the answer as a user message.
      const last = JSON.stringify(fake.calls.at(-1)!.body.messages);
      expect(last).toContain("mcp__atomic__ask_user");
      expect(last).toContain("waits for a person");
      expect(last).toContain("The person answered your question: yes");
      fake.assertOnlyFake();
    } finally {
      await fake.close();
    }
  },
  180_000,
);

agentTest(
  "pi asks the person (ask_user through atomic's pi extension): the stage parks with pi gone; kill -9 of the root; atomic answer: pi's session resumes with the answer",
  async () => {
    const trap = startNetworkTrap();
    const openai = await startFakeOpenAI((req) => {
      const turn = askerTurn(JSON.stringify(req.body.messages));
      if (turn === "ask") return oaToolCall("ask_user", { question: "Deploy to production?", choices: ["yes", "no"] });
      return oaText(turn === "wait" ? "waiting for the person" : `deploying: ${turn.answer}`);
    });
    try {
      const s = chatAgentSetup("pi", openai.url, { trap });
      await askUserAcrossKill({ home: s.home, dir: s.cwd, env: s.env }, "pi", () => openai.requests.length);
      const last = openai.requests.at(-1)!.body.messages;
      expect(last.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "assistant", "user"]);
      expect(JSON.stringify(last.at(-1)!.content)).toContain("The person answered your question: yes");
      expect(trap.strays).toEqual([]);
    } finally {
      trap.stop();
      await openai.close();
    }
  },
  180_000,
);

agentTest(
  "gemini asks the person (ask_user through the stage MCP server, served as ask_person): the stage parks with gemini gone; kill -9 of the root; atomic answer: gemini's session resumes (-r, from the next attempt's own gemini home) with the answer",
  async () => {
    const fake = await startFakeGemini();
    const reply = (req: LoggedRequest): GeminiReply => {
      const turn = askerTurn(JSON.stringify((req.body as any).contents));
      if (turn === "ask") return { calls: [{ name: "mcp_atomic_ask_person", args: { question: "Deploy to production?", choices: ["yes", "no"] } }] };
      return geminiSay(turn === "wait" ? "waiting for the person" : `deploying: ${turn.answer}`);
    };
    fake.push(...Array.from({ length: 3 }, () => reply));
    try {
      const h = geminiHome(fake);
      const settings = geminiUserSettings(h);
      await askUserAcrossKill(h, "gemini", () => fake.calls.length);
      // The last call is the same conversation: the question, its result, then the answer as a user message.
      const last = JSON.stringify((fake.calls.at(-1)!.body as any).contents);
      // gemini hides an MCP tool named ask_user (its own is always left out with -p): the server's is ask_person.
      expect(last).toContain("mcp_atomic_ask_person");
      // ... and says it is ask_user, the name the builtins' and users' prompts ask for.
      const declared = JSON.stringify((fake.calls.at(-1)!.body as any).tools);
      expect(declared).toMatch(/mcp_atomic_ask_person[^}]*This is the ask_user tool \(named ask_person here\)/);
      expect(last).toContain("waits for a person");
      expect(last).toContain("The person answered your question: yes");
      expect(readFileSync(settings.file, "utf8")).toBe(settings.text);
      fake.assertOnlyFake();
    } finally {
      await fake.close();
    }
  },
  180_000,
);

/**
 * The asker's openai sibling: busy until the question comes (a steer message, injected before its next turn; its
 * first turn held until `asked`), then replies with `reply` and ends saying where its answer went.
 */
function openaiAnswerer(asked: Promise<unknown>) {
  return startFakeOpenAI((req) => {
    const m = req.body.messages;
    const results = m.filter((x) => x.role === "tool").map((x) => String(x.content));
    if (results.some((t) => t.startsWith("your answer went to"))) return oaText(`answerer: ${results.at(-1)}`);
    const id = m.map((x) => /Question (a[0-9a-f]+) from stage asker/.exec(String(x.content ?? ""))?.[1]).find(Boolean);
    if (id) return { toolCalls: [{ id: "r1", name: "reply", arguments: { id, text: "42" } }] };
    return { toolCalls: [{ id: `l${results.length}`, name: "list", arguments: {} }], hold: results.length === 0 ? asked : undefined, paceMs: 100 };
  });
}

agentTest(
  "claude asks an openai sibling of its group (ask_agent through the stage MCP server); the sibling's reply is the tool result",
  async () => {
    const fake = await startFakeAnthropic();
    const openai = await openaiAnswerer(fake.callMatching());
    try {
      fake.push(toolUse("mcp__atomic__ask_agent", { to: "answerer", question: "what is 6*7?", timeout_s: 300 }), text("asker done"));
      const h = claudeHome(fake);
      const { r, result } = await runFixture(h, "claude", "ask", { ATOMIC_OPENAI_BASE_URL: openai.url, OPENAI_API_KEY: "sk-test" });
      expect(r.code).toBe(0);
      expect(result.outputs).toEqual({ asker: "asker done", answerer: "answerer: your answer went to stage asker" });
      // The reply reached claude as the ask_agent call's result.
      expect(JSON.stringify(fake.calls[1]!.body.messages)).toContain("42");
      fake.assertOnlyFake();
    } finally {
      await fake.close();
      await openai.close();
    }
  },
  300_000,
);

agentTest(
  "claude's ask_agent through the stage MCP server: a misspelt sibling is refused at once naming the close match, a sibling that does not answer within timeout_s is said in one sentence; the run goes on",
  async () => {
    const fake = await startFakeAnthropic();
    // The openai sibling stays busy (its one call held) until claude has had both refusals.
    const openai = await startFakeOpenAI(() => ({ ...oaText("answerer done"), hold: fake.callMatching((r) => fake.calls.indexOf(r) === 2) }));
    try {
      fake.push(
        toolUse("mcp__atomic__ask_agent", { to: "answrer", question: "what is 6*7?", timeout_s: 60 }),
        toolUse("mcp__atomic__ask_agent", { to: "answerer", question: "what is 6*7?", timeout_s: 1 }),
        text("asker done"),
      );
      const h = claudeHome(fake);
      const { r, result } = await runFixture(h, "claude", "ask", { ATOMIC_OPENAI_BASE_URL: openai.url, OPENAI_API_KEY: "sk-test" });
      expect(r.code).toBe(0);
      expect(result.outputs).toEqual({ asker: "asker done", answerer: "answerer done" });
      // Each refusal reached claude as its call's result.
      expect(JSON.stringify(fake.calls[1]!.body.messages)).toContain(
        "error: no stage answrer has started in this run (did you mean answerer?); ask_agent asks only a running stage: send a message instead, it waits for the stage to start",
      );
      expect(JSON.stringify(fake.calls[2]!.body.messages)).toMatch(/error: stage answerer did not answer question a[0-9a-f]+ within 1 s; go on without it, or ask again with a longer timeout_s/);
      fake.assertOnlyFake();
    } finally {
      await fake.close();
      await openai.close();
    }
  },
  300_000,
);

agentTest(
  "gemini asks an openai sibling of its group (ask_agent through the stage MCP server); the sibling's reply is the tool result",
  async () => {
    const fake = await startFakeGemini();
    const openai = await openaiAnswerer(fake.callMatching());
    try {
      fake.push({ calls: [{ name: "mcp_atomic_ask_agent", args: { to: "answerer", question: "what is 6*7?", timeout_s: 300 } }] }, geminiSay("asker done"));
      const h = geminiHome(fake);
      const settings = geminiUserSettings(h);
      const { r, result } = await runFixture(h, "gemini", "ask", { ATOMIC_OPENAI_BASE_URL: openai.url, OPENAI_API_KEY: "sk-test" });
      expect(r.code).toBe(0);
      expect(result.outputs).toEqual({ asker: "asker done", answerer: "answerer: your answer went to stage asker" });
      // The reply reached gemini as the ask_agent call's function response.
      const response = ((fake.calls[1]!.body as any).contents as any[]).flatMap((c) => c.parts).find((p: any) => p.functionResponse);
      expect(response.functionResponse.name).toBe("mcp_atomic_ask_agent");
      expect(JSON.stringify(response.functionResponse.response)).toContain("42");
      expect(readFileSync(settings.file, "utf8")).toBe(settings.text);
      fake.assertOnlyFake();
    } finally {
      await fake.close();
      await openai.close();
    }
  },
  300_000,
);

agentTest(
  "codex asks a claude sibling (ask_agent and reply, each through its CLI's stage MCP server); the reply is codex's tool result",
  async () => {
    const anthropic = await startFakeAnthropic();
    const responses = await startFakeResponses();
    try {
      // claude, the answerer: busy with a cheap tool until the question comes (a steer, taken after a tool call),
      // then replies through mcp__atomic__reply and ends. Bounded: a question that never comes ends the stage.
      let polls = 0;
      const answerer = (req: { body: { messages: unknown[] } }) => {
        const seen = JSON.stringify(req.body.messages);
        if (seen.includes("your answer went to stage asker")) return text("replied");
        const id = /Question (a[0-9a-f]+) from stage asker/.exec(seen)?.[1];
        if (id) return toolUse("mcp__atomic__reply", { id, text: "42" });
        if (++polls > 300) return text("no question came");
        return { ...toolUse("Glob", { pattern: "nothing-*.none" }), hold: Bun.sleep(100) };
      };
      anthropic.push(...Array.from({ length: 305 }, () => answerer));
      responses.push({ calls: [{ namespace: "mcp__atomic", name: "ask_agent", args: { to: "answerer", question: "what is 6*7?", timeout_s: 60 } }] }, say("asker done"));
      const h = codexHome(responses);
      const c = claudeHome(anthropic);
      writeFileSync(join(h.home, "config.json"), JSON.stringify({ runners: { codex: { path: agentBin("codex") }, claude: { path: agentBin("claude") } }, pricing: PRICES }));
      const { r, result } = await runFixture(h, "codex", "ask", { ...c.env, ...h.env }, "claude", 150_000);
      expect(r.code).toBe(0);
      expect(result.outputs).toEqual({ asker: "asker done", answerer: "replied" });
      // codex was offered the server's tools as its namespace, and the reply came back as the call's output.
      expect(JSON.stringify(responses.calls[0]!.body.tools)).toContain('"mcp__atomic"');
      const output = (responses.calls[1]!.body.input as { type: string; output?: unknown }[]).find((i) => i.type === "function_call_output");
      expect(JSON.stringify(output?.output)).toContain("42");
      anthropic.assertOnlyFake();
      responses.assertOnlyFake();
    } finally {
      await anthropic.close();
      await responses.close();
    }
  },
  180_000,
);
