/**
 * The openai runner through the real binary: stages run on pool workers
 * (the request, with its agent options, crosses the work queue), the fake
 * server is real HTTP on 127.0.0.1, the key reaches workers through their
 * environment only. Also: structured output from a valibot schema, usage
 * in `show`, the transcript through `logs`, and bad input (missing key
 * before any stage starts, unknown runner, invalid schema).
 */

import { afterAll, afterEach, beforeAll, expect } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { inOrder, startFakeOpenAI, text, toolCall, type FakeOpenAI } from "../helpers/fake-openai.ts";

const FIX = join(import.meta.dir, "fixtures");
const AGENT = join(FIX, "agent.ts");
let server: FakeOpenAI;

beforeAll(async () => {
  server = await startFakeOpenAI(inOrder(text("unused")));
});
afterEach(cleanupWhenIdle);
afterAll(async () => {
  await cleanupNow();
  await server.close();
});

/** Each test gets its own fake server (scripts differ), all real HTTP on 127.0.0.1. */
async function withServer(script: Parameters<typeof startFakeOpenAI>[0], fn: (s: FakeOpenAI, env: Record<string, string>) => Promise<void>) {
  const s = await startFakeOpenAI(script);
  try {
    await fn(s, { ATOMIC_OPENAI_BASE_URL: s.url, OPENAI_API_KEY: "sk-test" });
  } finally {
    await s.close();
  }
}

e2eTest("an openai stage runs on a pool worker: tool loop, usage in the result, show and logs", async () => {
  await withServer(
    inOrder(
      { toolCalls: [{ name: "list", arguments: {} }], usage: { prompt: 100, completion: 10, cached: 40, cost: 0.000123 } },
      { text: ["Hello ", "from the pool"], usage: { prompt: 200, completion: 20, cost: 0.000456 } },
    ),
    async (s, env) => {
      const home = makeTempDir("atomic-oai-home-");
      const cwd = makeTempDir("atomic-oai-cwd-");
      writeFileSync(join(cwd, "README.md"), "hi");
      const r = await runAtomic(["run", AGENT, "--json", "--workers", "1"], { home, cwd, env });
      expect(r.code).toBe(0);
      const result = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
      expect(result.outputs.text).toBe("Hello from the pool");
      expect(result.outputs.usage).toEqual({ inputTokens: 260, outputTokens: 30, cacheReadTokens: 40, cacheWriteTokens: 0, costMicroUsd: 579, turns: 2, model: "fake-model" });
      // the tool ran in the stage's cwd, on the worker
      expect(s.requests[1]!.body.messages.find((m) => m.role === "tool")!.content).toBe("README.md");
      expect(s.requests[0]!.headers.get("authorization")).toBe("Bearer sk-test");
      // show: usage per stage and in total
      const show = await runAtomic(["show", result.runId], { home, env });
      expect(show.code).toBe(0);
      expect(show.stdout).toMatch(/usage\s+260 in \+ 40 cached, 30 out, 2 turns, \$0\.000579/);
      const shown = JSON.parse((await runAtomic(["show", result.runId, "--json"], { home, env })).stdout);
      expect(shown.totals.usage.costMicroUsd).toBe(579);
      const ask = shown.steps.find((x: { name: string }) => x.name === "ask");
      expect(ask.usage.costMicroUsd).toBe(579);
      // the journal keeps a reference to the transcript, never the key
      const db = readFileSync(join(home, "atomic.db")).toString("latin1");
      expect(db).not.toContain("sk-test");
      const logs = await runAtomic(["logs", result.runId, "--stage", "ask"], { home, env });
      expect(logs.stdout).toContain("Hello from the pool");
      expect(logs.stdout).toContain("**tool list**");
      const runs = await runAtomic(["runs"], { home, env });
      expect(runs.stdout).toContain("$0.000579");
    },
  );
});

e2eTest("structured output from a valibot schema, validated in the worker and the root", async () => {
  await withServer(
    inOrder(toolCall("structured_output", { verdict: "meh", score: 2 }), toolCall("structured_output", { verdict: "ok", score: 9 })),
    async (s, env) => {
      const home = makeTempDir("atomic-oai-home-");
      const r = await runAtomic(["run", AGENT, "--json", "--workers", "1", "--input", "structured=true"], { home, env });
      expect(r.code).toBe(0);
      const result = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
      expect(result.outputs.structured).toEqual({ verdict: "ok", score: 9 });
      const schema = s.requests[0]!.body.tools!.find((t) => t.function.name === "structured_output")!.function.parameters;
      expect(schema).toEqual({
        type: "object",
        properties: { verdict: { enum: ["ok", "bad"] }, score: { type: "integer" } },
        required: ["verdict", "score"],
      });
    },
  );
});

/** Runs the agent workflow with `apiKey`: it must fail (exit 1) with no stack and no stage started; returns its stderr. */
async function refusedBeforeAnyStage(apiKey: string): Promise<string> {
  const home = makeTempDir("atomic-oai-home-");
  const env = { OPENAI_API_KEY: apiKey, ATOMIC_OPENAI_BASE_URL: "https://api.invalid/v1" };
  const r = await runAtomic(["run", AGENT, "--workers", "1"], { home, env });
  expect(r.code).toBe(1);
  expect(r.stderr).not.toContain("    at ");
  const runId = /run (\S+) failed/.exec(r.stderr)![1]!;
  const shown = JSON.parse((await runAtomic(["show", runId, "--json"], { home, env })).stdout);
  expect(shown.steps).toEqual([]); // nothing started
  return r.stderr;
}

e2eTest("a missing API key fails before any stage starts, with a hint", async () => {
  const stderr = await refusedBeforeAnyStage("");
  expect(stderr).toContain("the openai runner needs an API key for https://api.invalid/v1, and OPENAI_API_KEY is not set");
  expect(stderr).toContain("hint: export OPENAI_API_KEY");
});

e2eTest("an API key with a line break (a pasted key's newline) is refused before any stage starts, with a hint", async () => {
  const stderr = await refusedBeforeAnyStage("sk-pasted\n");
  expect(stderr).toContain("OPENAI_API_KEY holds a line break or a NUL character, which no request can carry");
  expect(stderr).toContain("hint: set OPENAI_API_KEY to the key alone");
  expect(stderr).not.toContain("sk-pasted");
});

e2eTest("an unknown runner and a runner binary not on PATH are refused clearly", async () => {
  const home = makeTempDir("atomic-oai-home-");
  let r = await runAtomic(["run", AGENT, "--workers", "1", "--input", "runner=nope"], { home });
  expect(r.code).toBe(1);
  expect(r.stderr).toContain('no runner named "nope" is available');
  expect(r.stderr).toMatch(/hint: available runners: shell, openai, claude, codex, gemini, opencode, pi/);
  r = await runAtomic(["run", AGENT, "--workers", "1", "--input", "runner=codex"], { home, env: { PATH: "/usr/bin:/bin" } });
  expect(r.code).toBe(1);
  expect(r.stderr).toContain('the codex runner needs the program "codex", which is not on PATH');
  expect(r.stderr).toContain("hint: install Codex");
  expect(r.stderr).toContain("runners.codex.path");
});

e2eTest("an invalid schema is refused before the stage starts", async () => {
  const home = makeTempDir("atomic-oai-home-");
  const file = join(makeTempDir("atomic-oai-wf-"), "bad-schema.ts");
  writeFileSync(
    file,
    `import { workflow, v } from "atomic";
export default workflow({ name: "bad-schema", async run(ctx) {
  return ctx.task("ask", { prompt: "x", runner: "openai", model: "m", schema: v.object({ when: v.date() }) });
} });`,
  );
  const r = await runAtomic(["run", file, "--workers", "1"], { home, env: { OPENAI_API_KEY: "sk-test", ATOMIC_OPENAI_BASE_URL: server.url } });
  expect(r.code).toBe(1);
  expect(r.stderr).toContain("the structured output schema is not usable at $.when: valibot's date schema has no JSON form");
  expect(server.requests.length).toBe(0);
});

e2eTest("atomic send to a live openai stage on the pool: interrupt aborts the request in flight, the message starts the next turn", async () => {
  const never = new Promise<unknown>(() => {});
  await withServer(
    (req) => (req.body.messages.some((m) => m.content === "change of plan") ? text("replanned") : { text: "never", hold: never }),
    async (s, env) => {
      const home = makeTempDir("atomic-oai-home-");
      const proc = spawnAtomic(["run", AGENT, "--json", "--workers", "1"], { home, env });
      const out = lineWatcher(proc.stdout);
      const started = JSON.parse(await out.waitFor(/"type":"run_started"/));
      await waitUntil(() => s.requests.length === 1, 30_000, "the first model request");
      const sent = await runAtomic(["send", started.runId, "ask", "change of plan", "--mode", "interrupt"], { home, env });
      expect(sent.code).toBe(0);
      expect(await proc.exited).toBe(0);
      expect(s.requests[0]!.aborted).toBe(true);
      expect(s.requests[1]!.body.messages.at(-1)).toMatchObject({ role: "user", content: "change of plan" });
      const result = JSON.parse(out.lines.at(-1)!);
      expect(result.outputs.text).toBe("replanned");
    },
  );
});

e2eTest("a provider streaming with CRLF and bare CR line ends, event: fields, comments and no final newline: the stage on the pool gets every delta", async () => {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) => JSON.stringify({ object: "chat.completion.chunk", model: "fake-model", choices: [{ index: 0, delta, finish_reason: finish }] });
  await withServer(
    inOrder({
      raw: [
        ": OPENROUTER PROCESSING\r\n\r\n",
        `event: message\r\ndata: ${chunk({ content: "Hello " })}\r\n\r\n`,
        `: keep-alive\rdata: ${chunk({ content: "over " })}\r\r`,
        `data: ${chunk({ content: "CRLF" }, "stop")}\r`,
        "\n\r\ndata: [DONE]",
      ],
    }),
    async (_s, env) => {
      const home = makeTempDir("atomic-oai-home-");
      const r = await runAtomic(["run", AGENT, "--json", "--workers", "1"], { home, env });
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      const result = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
      expect(result.outputs.text).toBe("Hello over CRLF");
      const logs = await runAtomic(["logs", result.runId, "--stage", "ask"], { home, env });
      expect(logs.stdout).toContain("Hello over CRLF");
    },
  );
});

e2eTest("a provider whose stream never sends a newline is cut off at the cap: the stage fails as provider_bad_response after its retries", async () => {
  await withServer(inOrder({ raw: ['data: {"choices":[{"delta":{"content":"'], repeat: "x".repeat(64 * 1024) }), async (s, env) => {
    const home = makeTempDir("atomic-oai-home-");
    writeFileSync(join(home, "config.json"), JSON.stringify({ openai: { maxRetries: 1, maxBackoffMs: 10 } }));
    const r = await runAtomic(["run", AGENT, "--workers", "1"], { home, env });
    expect(r.code).toBe(1);
    expect(r.stderr).not.toContain("    at ");
    expect(r.stderr).toContain('stage "ask" failed: the provider\'s stream sent a line or event over 4 MiB; the request was cut off there');
    expect(r.stderr).toContain("hint: see its output with: atomic logs");
    expect(s.requests.length).toBe(2);
    for (const req of s.requests) await waitUntil(() => req.aborted, 30_000, "the worker drops the runaway stream");
  });
});
