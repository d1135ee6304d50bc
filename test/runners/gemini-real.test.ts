/**
 * The real gemini CLI (0.61.0, test/agents) as an atomic stage through
 * dist/atomic, pointed at a fake Gemini API (fake-gemini.ts) with an
 * isolated HOME and the settings file GOOGLE_GEMINI_BASE_URL needs: text
 * and a tool call, the session id assigned up front (--session-id), usage
 * exact (prompt − cached), the real model from result.stats.models when no
 * model is given (priced, never "auto"), `atomic send` followUp delivered
 * by resuming the session by id, a 300 KiB prompt through stdin with
 * structured output asked for in the prompt, provider errors mapped to the
 * shared codes (a 500 that outlasts gemini's retries too, with
 * `general.maxAttempts` 2), a broken stream's message kept. Every test checks that
 * gemini connected nowhere but the fake. gemini runs as one process (atomic
 * sets GEMINI_CLI_NO_RELAUNCH): its tool's shell has one gemini among its
 * ancestors, not a second one that gemini started of itself. A gemini
 * that came to its stdin too late and lost the prompt (exit 42; the
 * fixture gemini-late-stdin.cjs makes the first one do so) is started
 * again.
 */

import { expect } from "bun:test";
import { copyFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { geminiHome } from "../helpers/agent-homes.ts";
import { AGENT_TEST_LIMIT_MS, agentTest } from "../helpers/agents.ts";
import { httpError, modelOf, say, shell, startFakeGemini, streamFailure, type GeminiReply } from "../helpers/fake-gemini.ts";
import { cancelDuringTool, realStages, runStage as runRealStage, sendMidTurn, shownStage, type Outputs } from "../helpers/real-agent-stage.ts";

/** Preloaded into gemini: its first process comes late to its stdin (the fixture's header). */
const LATE_STDIN = join(import.meta.dir, "fixtures", "gemini-late-stdin.cjs");

const setup = realStages<GeminiReply>(startFakeGemini, geminiHome, { runner: "gemini", model: "gemini-2.5-flash" });
const runStage = async (s: Parameters<typeof runRealStage>[0], inputs: Record<string, unknown>): Promise<Outputs> => (await runRealStage(s, inputs)).outputs;

/** The user turns' texts gemini sent (its own session context left out). */
const userTexts = (body: any): string[] =>
  (body.contents as any[]).filter((c) => c.role === "user").flatMap((c) => (c.parts as any[]).map((p) => String(p.text ?? ""))).filter((t) => t && !t.startsWith("<session_context>"));

/** The names of the tools a request offered the model, sorted. */
const offeredTools = (body: any): string[] => ((body.tools ?? []) as any[]).flatMap((t) => (t.functionDeclarations ?? []).map((f: any) => f.name)).sort();

// One gemini start for the tool call and the tools' mapping: neither changes what the other checks (docs/design/testing.md, session 12).
agentTest("gemini: a tool call, then text; the session id assigned up front; usage exact (prompt − cached), priced for -m; tools in atomic's terms are mapped to gemini's own, the others are not offered; a gemini that lost its piped prompt is started again", async () => {
  // The tool's shell also runs a script that counts the gemini processes among its ancestors (processes running node,
  // by their executable: Node 24 names its main thread, so /proc/PID/comm says MainThread; whose command lines hold
  // gemini's `-o stream-json`; a script, since gemini refuses a command with a command substitution).
  const s = await setup(shell("echo hi > out.txt; sh ancestors.sh > geminis.txt; echo done", { prompt: 150, cached: 50, output: 7 }), say(["Hel", "lo"], { prompt: 300, cached: 200, output: 20 }));
  writeFileSync(
    join(s.cwd, "ancestors.sh"),
    'p=$PPID; n=0\nwhile [ "$p" -gt 1 ]; do\n  [ "$(basename "$(readlink /proc/$p/exe)")" = node ] && tr "\\0" " " < /proc/$p/cmdline | grep -q -- "-o stream-json" && n=$((n + 1))\n  p=$(cut -d")" -f2 /proc/$p/stat | cut -d" " -f3)\ndone\necho $n\n',
  );
  // The first gemini comes round to its stdin after its 500 ms wait for it (as on a busy machine) and exits 42 without
  // the prompt (the fixture's header); the stage starts it again, and the second one works.
  // The preload is copied into the stage's cwd: gemini runs in atomic's default sandbox, whose /tmp is its own, so a
  // checkout under /tmp (a fresh clone there) would hide the fixture from it and gemini would not start at all.
  const mark = join(s.cwd, "late-stdin");
  const preload = join(s.cwd, "late-stdin.cjs");
  copyFileSync(LATE_STDIN, preload);
  Object.assign(s.h.env, { NODE_OPTIONS: `--require ${preload}`, LATE_STDIN_MARK: mark });
  const { runId, outputs } = await runRealStage(s, { prompt: "write out.txt", tools: JSON.stringify(["read", "grep", "bash"]) });
  expect(existsSync(mark)).toBe(true);
  expect((await shownStage(s.h.home, s.h.env, runId, "ask")).transcript).toContain("(gemini read no prompt from its stdin: started again)");
  expect(outputs.status).toBe("completed");
  expect(outputs.text).toBe("Hello");
  expect(readFileSync(join(s.cwd, "out.txt"), "utf8")).toBe("hi\n");
  expect(readFileSync(join(s.cwd, "geminis.txt"), "utf8")).toBe("1\n");
  expect(outputs.sessionId).toMatch(/^[0-9a-f-]{36}$/);
  expect(outputs.usage).toMatchObject({ inputTokens: 200, cacheReadTokens: 250, outputTokens: 27, turns: 1, model: "gemini-2.5-flash" });
  // 200×1 + 27×4 + 250×0.25
  expect(outputs.usage!.costMicroUsd).toBe(371);
  expect(userTexts(s.fake.calls[0]!.body)).toContain("write out.txt");
  expect(offeredTools(s.fake.calls[0]!.body)).toContain("run_shell_command");
  expect(offeredTools(s.fake.calls[0]!.body)).toEqual(["grep_search", "list_background_processes", "read_background_output", "read_file", "run_shell_command"]);
  expect(s.fake.calls.every((c) => modelOf(c.path) === "gemini-2.5-flash")).toBe(true);
  s.fake.assertOnlyFake();
});

agentTest("gemini: atomic send followUp is queued until the turn ends, then delivered by resuming the session by id; usage summed over both processes", async () => {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const s = await setup({ ...say("first answer", { prompt: 100, output: 10 }), hold: held }, say("second answer", { prompt: 250, cached: 100, output: 15 }));
  const outputs = await sendMidTurn(s, { prompt: "start" }, "also check the docs", "followUp", release);
  expect(outputs.status).toBe("completed");
  expect(outputs.text).toBe("second answer");
  expect(s.fake.calls.length).toBe(2);
  const second = s.fake.calls[1]!.body;
  expect(JSON.stringify(second.contents)).toContain("first answer");
  expect(userTexts(second)).toEqual(["start", "also check the docs"]);
  expect(outputs.usage).toMatchObject({ inputTokens: 250, cacheReadTokens: 100, outputTokens: 25, turns: 2 });
  s.fake.assertOnlyFake();
});

// One gemini start for three things none of which changes the others (docs/design/testing.md, session 12): no model
// named, a prompt of 300 KiB with structured output, and `tools: []`.
agentTest("gemini without a model: the stage records the model that answered (from result.stats.models), priced, not 'auto'; a 300 KiB prompt goes through stdin; structured output asked for in the prompt and parsed; tools: [] offers none", async () => {
  const s = await setup(say('{"verdict":"bad","score":2}', { prompt: 100, cached: 40, output: 10 }));
  const prompt = `review this: ${"y".repeat(300 * 1024)}`;
  const outputs = await runStage(s, { prompt, structured: true, model: "", tools: JSON.stringify([]) });
  expect(outputs.status).toBe("completed");
  const answered = modelOf(s.fake.calls[0]!.path);
  expect(answered).not.toBe("auto");
  expect(outputs.usage).toMatchObject({ inputTokens: 60, cacheReadTokens: 40, outputTokens: 10, model: answered });
  expect(outputs.usage!.unpriced).toBeUndefined();
  expect(outputs.usage!.costMicroUsd).toBeGreaterThan(0);
  expect(outputs.structured).toEqual({ verdict: "bad", score: 2 });
  const sent = userTexts(s.fake.calls[0]!.body).join("\n");
  expect(sent).toContain(prompt);
  expect(sent).toContain("Reply with ONLY a JSON value");
  expect(offeredTools(s.fake.calls[0]!.body)).toEqual([]);
  s.fake.assertOnlyFake();
});

for (const [name, replies, code, words] of [
  ["401", [httpError(401, "UNAUTHENTICATED", "API key not valid")], "provider_auth", /gemini: the provider refused the API key \(HTTP 401\): API key not valid/],
  ["400", [httpError(400, "INVALID_ARGUMENT", "Unknown field foo")], "provider_bad_request", /gemini: the provider refused the request \(HTTP 400\): Unknown field foo/],
  // gemini gives up at once on a 429 whose retry delay is long (it would retry a short one itself)
  ["429", [httpError(429, "RESOURCE_EXHAUSTED", "Rate limit hit. Please retry in 1200s.", { "retry-after": "1200" })], "provider_rate_limit", /gemini: rate limited by the provider \(HTTP 429\): .*Please retry in 1200s/],
  ["an error inside the stream", Array<GeminiReply>(4).fill(streamFailure("The model crashed")), "provider_unavailable", /gemini: the provider's reply broke off: Model stream ended without a finish reason/],
] as const) {
  agentTest(
    `gemini: provider error ${name} fails the stage as ${code}, naming gemini, its exit status and the provider's words`,
    async () => {
      const s = await setup(...replies);
      const outputs = await runStage(s, { prompt: "hi" });
      expect(outputs.status).toBe("failed");
      expect(outputs.error!.code).toBe(code);
      expect(outputs.error!.message).toMatch(words);
      expect(outputs.error!.message).toMatch(/\(gemini exited with status \d+\)$/);
      s.fake.assertOnlyFake();
    },
  );
}

agentTest(
  "gemini: a 500 that outlasts gemini's own retries fails the stage as provider_unavailable, naming gemini, its exit status and the provider's words",
  async () => {
    const s = await setup(...Array<GeminiReply>(4).fill(httpError(500, "INTERNAL", "the backend is down")));
    // gemini tries a request up to `general.maxAttempts` times (10 by default, with a backoff of minutes): 2 here.
    const settings = join(s.h.env.HOME!, ".gemini", "settings.json");
    const current = JSON.parse(readFileSync(settings, "utf8"));
    writeFileSync(settings, JSON.stringify({ ...current, general: { ...current.general, maxAttempts: 2 } }));
    const outputs = await runStage(s, { prompt: "hi" });
    expect(outputs.status).toBe("failed");
    expect(outputs.error!.code).toBe("provider_unavailable");
    expect(outputs.error!.message).toMatch(/^gemini: the provider is unavailable \(HTTP 500\): the backend is down/);
    expect(outputs.error!.message).toMatch(/\(gemini exited with status \d+\)$/);
    expect(s.fake.calls.length).toBe(2);
    s.fake.assertOnlyFake();
  },
);

// One gemini start for the refused tool and the 500 its retry survives: neither changes what the other checks (docs/design/testing.md, session 14).
agentTest("gemini: a 500 that gemini's own retry survives: the stage completes, usage of the successful calls only; a tool the stage did not allow, called anyway, is refused by gemini and is a warning on the stage (transcript and show)", async () => {
  const s = await setup(httpError(500, "INTERNAL", "boom"), shell("echo hi > out.txt", { prompt: 30, output: 3 }), say("could not", { prompt: 40, output: 4 }));
  const { runId, outputs } = await runRealStage(s, { prompt: "write out.txt", tools: JSON.stringify(["read"]) });
  expect(outputs.status).toBe("completed");
  expect(outputs.text).toBe("could not");
  // the 500 counts nothing: the shell call's and the answer's usage
  expect(outputs.usage).toMatchObject({ inputTokens: 70, outputTokens: 7 });
  expect(s.fake.calls.length).toBe(3);
  const seen = await shownStage(s.h.home, s.h.env, runId, "ask");
  const warning = /gemini refused the tool run_shell_command \(\{"command":"echo hi > out.txt"\}\): Tool "run_shell_command" not found.*; hint: name it in the stage's tools to allow it, e.g. tools: \["read","bash"\]/;
  expect(seen.show).toMatch(new RegExp(`warning: ${warning.source}`));
  expect(seen.transcript).toMatch(new RegExp(`## Warning\\s+${warning.source}`));
  // the transcript names the refused call's tool, not its id
  expect(seen.transcript).toMatch(/\*\*tool run_shell_command\*\* \(error\)/);
  s.fake.assertOnlyFake();
});

agentTest("gemini: atomic send interrupt ends the turn in flight, then resumes the session with the message", async () => {
  const s = await setup({ ...say("never"), hold: new Promise(() => {}) }, say("replanned", { prompt: 80, output: 6 }));
  const outputs = await sendMidTurn(s, { prompt: "start" }, "change of plan", "interrupt");
  expect(outputs.status).toBe("completed");
  expect(outputs.text).toBe("replanned");
  expect(userTexts(s.fake.calls.at(-1)!.body).at(-1)).toBe("change of plan");
  s.fake.assertOnlyFake();
});

for (const how of ["cancel", "SIGINT"] as const) {
  agentTest(
    `gemini: ${how === "cancel" ? "atomic cancel" : "Ctrl-C (SIGINT) of atomic run"} with a long-running shell tool: the tool's processes end, SIGTERM before SIGKILL`,
    async () => {
      const s = await setup();
      await cancelDuringTool(s, (command) => shell(command), how);
      s.fake.assertOnlyFake();
    },
    AGENT_TEST_LIMIT_MS,
  );
}
