/**
 * The openai runner through the real binary: stages run on pool workers
 * (the request, with its agent options, crosses the work queue), the fake
 * server is real HTTP on 127.0.0.1, the key reaches workers through their
 * environment only. Also: structured output from a valibot schema, usage
 * in `show`, the transcript through `logs`, and bad input (missing key
 * before any stage starts, unknown runner, invalid schemas), the file
 * tools' confinement on a worker, and the corrective re-prompt for an
 * answer that violates `oneOf`.
 */

import { afterAll, afterEach, beforeAll, expect } from "bun:test";
import { spawnSync } from "node:child_process";
import { readFileSync, symlinkSync, writeFileSync } from "node:fs";
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
        properties: { verdict: { enum: ["ok", "bad"], type: "string" }, score: { type: "integer" } },
        required: ["verdict", "score"],
      });
    },
  );
});

e2eTest("on a pool worker the file tools stay inside the cwd: no grep through a symlink out, no fifo opened, reads paged", async () => {
  await withServer(
    inOrder(
      toolCall("grep", { pattern: "SECRET|hello" }),
      toolCall("read", { path: "out/secret.txt" }),
      toolCall("read", { path: "pipe" }),
      toolCall("read", { path: "big.txt" }),
      text("done"),
    ),
    async (s, env) => {
      const home = makeTempDir("atomic-oai-home-");
      const cwd = makeTempDir("atomic-oai-cwd-");
      const outside = makeTempDir("atomic-oai-outside-");
      writeFileSync(join(outside, "secret.txt"), "SECRET from outside\n");
      symlinkSync(outside, join(cwd, "out"));
      writeFileSync(join(cwd, "notes.txt"), "hello inside\n");
      writeFileSync(join(cwd, "big.txt"), "0123456789abcdef\n".repeat(10_000));
      expect(spawnSync("mkfifo", [join(cwd, "pipe")]).status).toBe(0);
      const r = await runAtomic(["run", AGENT, "--json", "--workers", "1"], { home, cwd, env });
      expect(r.code).toBe(0);
      const results = s.requests.slice(1).map((q) => q.body.messages.at(-1)!.content!);
      expect(results[0]).toBe("notes.txt:1: hello inside\n(1 symbolic link(s) leading outside the working directory not followed)");
      expect(results[1]).toBe(`error: refused: "out/secret.txt" is outside the stage's working directory`);
      expect(results[2]).toBe("error: refused: pipe is a fifo, not a regular file");
      expect(results[3]!.length).toBeLessThanOrEqual(32 * 1024);
      expect(results[3]).toMatch(/\n… \(big\.txt has 170000 bytes; this was bytes 0 to \d+; call read with offset \d+ for the rest\)$/);
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

/** A workflow file whose one openai stage has `schema` (TypeScript source); returns its path. */
function schemaWorkflow(schemaSource: string): string {
  const file = join(makeTempDir("atomic-oai-wf-"), "schema.ts");
  writeFileSync(
    file,
    `import { workflow, v } from "atomic";
export default workflow({ name: "schema", async run(ctx) {
  const r = await ctx.task("ask", { prompt: "x", runner: "openai", model: "m", schema: ${schemaSource} });
  return { structured: r.structured ?? null };
} });`,
  );
  return file;
}

e2eTest("an invalid schema is refused before the stage starts, in one sentence with a hint", async () => {
  const home = makeTempDir("atomic-oai-home-");
  const env = { OPENAI_API_KEY: "sk-test", ATOMIC_OPENAI_BASE_URL: server.url };
  const cases: [string, string][] = [
    ['{ type: "object", properties: { a: { type: "string" } }, requird: ["a"] }', 'the structured output schema is not valid JSON Schema: unknown keyword: "requird"'],
    ['{ type: "string", pattern: "(" }', "the structured output schema is not valid JSON Schema: a pattern is not a valid regular expression"],
    ['{ type: "string", format: "colour" }', 'the structured output schema is not valid JSON Schema: unknown format "colour"'],
    ['{ type: "object", properties: { a: { $ref: "#/definitions/missing" } } }', "the structured output schema is not valid JSON Schema: can't resolve reference #/definitions/missing"],
    ['{ type: "obj" }', 'the structured output schema is not valid JSON Schema at /type: must be equal to one of the allowed values ("array", "boolean", "integer", "null", "number", "object", "string")'],
    ["v.object({ when: v.date() })", 'the structured output schema cannot be described as JSON Schema: the "date" schema cannot be converted'],
  ];
  for (const [schema, message] of cases) {
    const r = await runAtomic(["run", schemaWorkflow(schema), "--workers", "1"], { home, env });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(message);
    expect(r.stderr).toContain("hint: use valibot schemas with a JSON form");
    expect(r.stderr).not.toContain("    at ");
  }
  expect(server.requests.length).toBe(0); // no stage reached the model
});

e2eTest("a structured answer that violates oneOf (matches both shapes) gets the corrective re-prompt; enum compares objects by value", async () => {
  const schema = `{
    type: "object",
    properties: {
      shape: { oneOf: [{ type: "object", required: ["radius"] }, { type: "object", required: ["side"] }] },
      level: { enum: [{ min: 1, max: 5 }, "none"] },
    },
    required: ["shape", "level"],
  }`;
  await withServer(
    inOrder(
      toolCall("structured_output", { shape: { radius: 1, side: 2 }, level: "none" }),
      toolCall("structured_output", { shape: { radius: 1 }, level: { max: 5, min: 1 } }),
      toolCall("structured_output", { shape: { radius: 1 }, level: "none" }),
    ),
    async (s, env) => {
      const home = makeTempDir("atomic-oai-home-");
      const r = await runAtomic(["run", schemaWorkflow(schema), "--json", "--workers", "1"], { home, env });
      expect(r.code).toBe(0);
      const result = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
      // the second answer is accepted: its level equals the enum's object, keys in another order
      expect(result.outputs.structured).toEqual({ shape: { radius: 1 }, level: { max: 5, min: 1 } });
      expect(s.requests.length).toBe(2);
      const correction = s.requests[1]!.body.messages.at(-1)!;
      expect(correction.role).toBe("tool");
      expect(correction.content).toBe("The value does not match the schema: $.shape: must match exactly one schema in oneOf. Call structured_output again with a corrected value.");
    },
  );
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
