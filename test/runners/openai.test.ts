/**
 * The openai runner's agent loop against the fake OpenAI-compatible server
 * (real HTTP on 127.0.0.1): streaming, tool calls split across chunks,
 * parallel calls, servers without ids or with every call at index 0, usage
 * (with and without a usage chunk), retries (429 + Retry-After, 500, a
 * cut-off stream, malformed JSON), provider error classes, structured
 * output with corrective re-prompts, tool confinement, delivery modes and
 * cancel. The runner runs in this process, as a worker runs it.
 */

import { stageLogPath } from "../../src/artifacts/stage-logs.ts";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseRetryAfter, retryDelay, ProviderError } from "../../src/runners/openai/provider-errors.ts";
import type { StageRequest } from "../../src/runners/types.ts";
import { killAllGroups, liveGroupCount } from "../../src/runners/shell/process-groups.ts";
import type { StageResult } from "../../src/sdk/types.ts";
import { deferred, waitUntil } from "../engine/helpers.ts";
import { inOrder, text, toolCall, type FakeOpenAI, type Reply } from "../helpers/fake-openai.ts";
import { closeStage, openStage, runStage, stageRequest, type OpenAIStage } from "../helpers/openai-stage.ts";

let stage: OpenAIStage;
let server: FakeOpenAI;
let dir: string;

beforeEach(async () => {
  stage = await openStage();
  ({ server, dir } = stage);
});

afterEach(async () => {
  killAllGroups("SIGKILL"); // a failed test must not leave a bash tool's process behind
  await closeStage(stage);
  expect(liveGroupCount()).toBe(0);
});

const request = (extra: Partial<StageRequest> = {}, agent: StageRequest["agent"] = {}) => stageRequest(stage, extra, agent);
const run = runStage;

describe("streaming and usage", () => {
  test("streams text in chunks; usage from the usage chunk, cached tokens not counted twice", async () => {
    server.setScript(inOrder({ text: ["Hel", "lo ", "world"], usage: { prompt: 1000, completion: 50, cached: 600 } }));
    const { result, events } = run(request());
    const r = await result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("Hello world");
    expect(events.filter((e) => e.type === "text_delta").map((e) => (e as { text: string }).text)).toEqual(["Hel", "lo ", "world"]);
    expect(r.usage).toMatchObject({ inputTokens: 400, cacheReadTokens: 600, outputTokens: 50, turns: 1, model: "fake-model", unpriced: true });
    expect(r.usage!.costMicroUsd).toBe(0);
    // the request asked for streamed usage, with the key
    expect(server.requests[0]!.body.stream_options?.include_usage).toBe(true);
    expect(server.requests[0]!.headers.get("authorization")).toBe("Bearer sk-test");
    // transcript, raw event log (before parsing); the transcript is what readers take for stdout; no stderr.log without diagnostics
    expect(readFileSync(r.transcriptPath!, "utf8")).toContain("Hello world");
    expect(readFileSync(r.eventsPath!, "utf8")).toContain('"content":"Hel"');
    expect(stageLogPath(req0Dir(r), "stdout")).toBe(r.transcriptPath!);
    expect(existsSync(r.errorPath!)).toBe(false);
  });

  test("OpenRouter cost is used as reported; a price table prices others exactly", async () => {
    server.setScript(inOrder({ text: "a", usage: { prompt: 100, completion: 10, cost: 0.001234 } }));
    let r = await run(request()).result;
    expect(r.usage!.costMicroUsd).toBe(1234);
    expect(r.usage!.unpriced).toBeUndefined();
    server.setScript(inOrder({ text: "a", usage: { prompt: 1_000, completion: 100, cached: 400 } }));
    r = await run(request({}, { pricing: { "fake-model": { inputPerMTok: 2, outputPerMTok: 8, cacheReadPerMTok: 0.5 } } })).result;
    // 600 × 2 + 400 × 0.5 + 100 × 8 micro-dollars
    expect(r.usage!.costMicroUsd).toBe(1200 + 200 + 800);
  });

  test("a server without a usage chunk (and choices: null) gets an estimate, marked estimated", async () => {
    server.setScript(inOrder({ text: "some answer", usage: null }));
    const r = await run(request()).result;
    expect(r.status).toBe("completed");
    expect(r.usage!.estimated).toBe(true);
    expect(r.usage!.inputTokens).toBeGreaterThan(0);
    server.setScript(inOrder({ text: "x", usage: { prompt: 5, completion: 1 }, nullChoicesOnUsage: true }));
    const r2 = await run(request()).result;
    expect(r2.usage).toMatchObject({ inputTokens: 5, outputTokens: 1 });
  });
});

describe("tool calls", () => {
  test("arguments split across chunks; parallel calls answered in order; usage summed over turns", async () => {
    writeFileSync(join(dir, "work", "a.txt"), "alpha\n");
    writeFileSync(join(dir, "work", "b.txt"), "beta\n");
    server.setScript(
      inOrder(
        { toolCalls: [{ name: "read", arguments: { path: "a.txt" } }, { name: "read", arguments: { path: "b.txt" } }], argChunks: 5, usage: { prompt: 10, completion: 3 } },
        text("both read", { prompt: 30, completion: 4 }),
      ),
    );
    const { result, events } = run(request());
    const r = await result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("both read");
    const second = server.requests[1]!.body.messages;
    const tools = second.filter((m) => m.role === "tool");
    expect(tools.map((m) => m.content)).toEqual(["alpha\n", "beta\n"]);
    const assistant = second.find((m) => m.role === "assistant")!;
    expect(assistant.tool_calls!.map((c) => JSON.parse(c.function.arguments).path)).toEqual(["a.txt", "b.txt"]);
    expect(events.filter((e) => e.type === "tool_end").length).toBe(2);
    expect(r.usage).toMatchObject({ inputTokens: 40, outputTokens: 7, turns: 2 });
  });

  test("servers that omit ids, and servers that put every call at index 0", async () => {
    writeFileSync(join(dir, "work", "a.txt"), "A");
    writeFileSync(join(dir, "work", "b.txt"), "B");
    const calls = [{ name: "read", arguments: { path: "a.txt" } }, { name: "read", arguments: { path: "b.txt" } }];
    for (const quirk of [{ omitIds: true }, { allAtIndexZero: true }] as Partial<Reply>[]) {
      server.setScript(inOrder({ toolCalls: calls, ...quirk, usage: { prompt: 1, completion: 1 } }, text("ok")));
      const before = server.requests.length;
      const r = await run(request()).result;
      expect(r.status).toBe("completed");
      const msgs = server.requests[before + 1]!.body.messages;
      const assistant = msgs.find((m) => m.role === "assistant")!;
      expect(assistant.tool_calls!.length).toBe(2);
      const ids = assistant.tool_calls!.map((c) => c.id);
      expect(new Set(ids).size).toBe(2);
      expect(msgs.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, m.content])).toEqual([
        [ids[0], "A"],
        [ids[1], "B"],
      ]);
    }
  });

  test("tools work inside the cwd: write, edit, list, grep, bash", async () => {
    server.setScript(
      inOrder(
        toolCall("write", { path: "sub/x.txt", content: "one two" }),
        toolCall("edit", { path: "sub/x.txt", old_text: "two", new_text: "three" }),
        toolCall("list", { path: "sub" }),
        toolCall("grep", { pattern: "thr" }),
        toolCall("bash", { command: "cat sub/x.txt; echo err >&2; exit 3" }),
        text("done"),
      ),
    );
    const r = await run(request()).result;
    expect(r.status).toBe("completed");
    expect(readFileSync(join(dir, "work", "sub", "x.txt"), "utf8")).toBe("one three");
    const results = server.requests.slice(1).map((q) => q.body.messages.at(-1)!.content);
    expect(results[0]).toContain("wrote 7 characters");
    expect(results[1]).toContain("replaced 1");
    expect(results[2]).toBe("x.txt");
    expect(results[3]).toContain("sub/x.txt:1: one three");
    expect(results[4]).toContain("exit code 3");
    expect(results[4]).toContain("one three");
    expect(results[4]).toContain("err");
  });

  test("a tool call escaping the cwd is refused, reported to the model as an error, never executed", async () => {
    const outside = join(dir, "secret.txt");
    writeFileSync(outside, "secret");
    symlinkSync(dir, join(dir, "work", "link"));
    server.setScript(
      inOrder(
        toolCall("read", { path: "../secret.txt" }),
        toolCall("write", { path: "/tmp/atomic-escape-test.txt", content: "x" }),
        toolCall("read", { path: "link/secret.txt" }),
        text("gave up"),
      ),
    );
    const { result, events } = run(request());
    const r = await result;
    expect(r.status).toBe("completed");
    const results = server.requests.slice(1).map((q) => q.body.messages.at(-1)!.content!);
    for (const res of results) expect(res).toMatch(/^error: refused: .* is outside the stage's working directory$/);
    expect(existsSync("/tmp/atomic-escape-test.txt")).toBe(false);
    expect(events.filter((e) => e.type === "tool_end" && !e.ok).length).toBe(3);
  });
});

describe("retries and provider errors", () => {
  test("429 with Retry-After, 500, a cut-off stream and malformed JSON are retried, then the reply is used", async () => {
    server.setScript(
      inOrder(
        { status: 429, headers: { "retry-after": "0" } },
        { status: 500 },
        { text: ["partial"], cutOff: true },
        { malformed: true },
        text("finally"),
      ),
    );
    const r = await run(request()).result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("finally");
    expect(server.requests.length).toBe(5);
    expect(readFileSync(r.errorPath!, "utf8")).toMatch(/retry 1 .*provider_rate_limit[\s\S]*provider_unavailable[\s\S]*provider_bad_response[\s\S]*provider_bad_response/);
  });

  test("a request past its timeout is aborted and retried; the retry's reply is used", async () => {
    const never = new Promise(() => {});
    server.setScript(inOrder({ ...text("late"), hold: never }, text("in time")));
    const r = await run(request({}, { requestTimeoutMs: 150 })).result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("in time");
    expect(server.requests.length).toBe(2);
    await waitUntil(() => server.requests[0]!.aborted);
    expect(readFileSync(r.errorPath!, "utf8")).toMatch(/retry 1 .*provider_unavailable.*timed out/);
  });

  test("a request that keeps timing out fails the stage as unavailable, naming the timeout", async () => {
    server.setScript(inOrder({ ...text("late"), hold: new Promise(() => {}) }));
    const r = await run(request({}, { requestTimeoutMs: 100, maxRetries: 1 })).result;
    expect(r.status).toBe("failed");
    expect(r.error).toMatchObject({ code: "provider_unavailable" });
    expect(r.error!.message).toContain("timed out");
    expect(server.requests.length).toBe(2);
  });

  test("retries are bounded: a server that keeps failing fails the stage as unavailable", async () => {
    server.setScript(inOrder({ status: 503 }));
    const r = await run(request({}, { maxRetries: 2 })).result;
    expect(r.status).toBe("failed");
    expect(r.error!.code).toBe("provider_unavailable");
    expect(server.requests.length).toBe(3);
  });

  test("error classes: auth, quota, rate limit, unknown model, bad request; one-line messages", async () => {
    const cases: [Reply, string][] = [
      [{ status: 401, body: JSON.stringify({ error: { message: "Incorrect API key provided" } }) }, "provider_auth"],
      [{ status: 429, body: JSON.stringify({ error: { message: "You exceeded your current quota", code: "insufficient_quota" } }) }, "provider_quota"],
      [{ status: 404, body: JSON.stringify({ error: { message: "The model `nope` does not exist", code: "model_not_found" } }) }, "provider_unknown_model"],
      [{ status: 400, body: JSON.stringify({ error: { message: "messages: bad" } }) }, "provider_bad_request"],
    ];
    for (const [reply, code] of cases) {
      server.setScript(inOrder(reply));
      const before = server.requests.length;
      const r = await run(request()).result;
      expect(r.status).toBe("failed");
      expect(r.error!.code).toBe(code);
      expect(r.error!.message).not.toContain("\n");
      expect(server.requests.length - before).toBe(1); // not retried
    }
    server.setScript(inOrder({ status: 429 }));
    const r = await run(request({}, { maxRetries: 1 })).result;
    expect(r.error!.code).toBe("provider_rate_limit");
  });

  test("an unreachable endpoint is provider_unavailable naming the URL", async () => {
    const r = await run(request({}, { baseUrl: "http://127.0.0.1:9/v1", maxRetries: 0 })).result;
    expect(r.status).toBe("failed");
    expect(r.error!.code).toBe("provider_unavailable");
    expect(r.error!.message).toContain("127.0.0.1:9");
  });

  test("with an HTTP proxy configured the calls go through it (fetch): tool loop, a retried 429 and a cut-off stream", async () => {
    // The fake server answers a proxied request (absolute URL in the request line) as its own.
    server.setScript(inOrder({ status: 429, headers: { "retry-after": "0" } }, toolCall("list", {}), { text: ["partial"], cutOff: true }, text("through the proxy")));
    const saved = process.env.http_proxy;
    process.env.http_proxy = new URL(server.url).origin;
    try {
      const r = await run(request({}, { baseUrl: "http://model-server.invalid/v1" })).result;
      expect(r.status).toBe("completed");
      expect(r.text).toBe("through the proxy");
      expect(r.usage?.turns).toBe(2);
      expect(server.requests.length).toBe(4);
    } finally {
      if (saved === undefined) delete process.env.http_proxy;
      else process.env.http_proxy = saved;
    }
  });

  test("Retry-After is honoured (seconds and HTTP dates), capped; backoff grows otherwise", () => {
    expect(parseRetryAfter("3")).toBe(3000);
    expect(parseRetryAfter(null)).toBeUndefined();
    const date = new Date(Date.now() + 10_000).toUTCString();
    expect(parseRetryAfter(date)!).toBeGreaterThan(5_000);
    const limited = new ProviderError("provider_rate_limit", "x", 429, 7_000);
    expect(retryDelay(1, limited, 30_000)).toBe(7_000);
    expect(retryDelay(1, limited, 2_000)).toBe(2_000);
    const plain = new ProviderError("provider_unavailable", "x", 500);
    expect(retryDelay(3, plain, 60_000, () => 0.5)).toBe(2_000);
  });
});

describe("structured output", () => {
  const schema = { type: "object", properties: { verdict: { enum: ["ok", "bad"] }, score: { type: "integer" } }, required: ["verdict", "score"] };

  test("succeeds after one corrective re-prompt", async () => {
    server.setScript(
      inOrder(
        toolCall("structured_output", { verdict: "maybe", score: 1 }),
        toolCall("structured_output", { verdict: "ok", score: 7 }),
      ),
    );
    const r = await run(request({}, { schema })).result;
    expect(r.status).toBe("completed");
    expect(r.structured).toEqual({ verdict: "ok", score: 7 });
    expect(server.requests.length).toBe(2);
    const correction = server.requests[1]!.body.messages.at(-1)!;
    expect(correction.role).toBe("tool");
    expect(correction.content).toContain(`$.verdict: must be one of "ok", "bad"`);
    expect(server.requests[0]!.body.tools!.map((t) => t.function.name)).toContain("structured_output");
  });

  test("a plain-text answer is re-prompted; fails clearly after three corrective re-prompts", async () => {
    server.setScript(inOrder(text("I think it is fine"), toolCall("structured_output", { verdict: "ok" })));
    const r = await run(request({}, { schema })).result;
    expect(r.status).toBe("failed");
    expect(r.error!.code).toBe("structured_output_invalid");
    expect(r.error!.message).toContain("3 corrective re-prompts");
    expect(r.error!.message).toContain("$.score: required");
    expect(server.requests.length).toBe(4);
  });

  test("a non-object schema is wrapped as { value }; output file written", async () => {
    server.setScript(inOrder(toolCall("structured_output", { value: ["a", "b"] })));
    const r = await run(request({}, { schema: { type: "array", items: { type: "string" } }, output: "out/answer.json" })).result;
    expect(r.status).toBe("completed");
    expect(r.structured).toEqual(["a", "b"]);
    expect(JSON.parse(readFileSync(join(dir, "work", "out", "answer.json"), "utf8"))).toEqual(["a", "b"]);
  });
});

describe("delivery modes", () => {
  test("steer lands before the next model call; followUp after the final answer; interrupt aborts the request in flight", async () => {
    const gate = deferred();
    const hold = deferred();
    server.setScript((req, i) => {
      if (i === 0) return { ...toolCall("list", {}), hold: gate.promise };
      if (i === 1) return { text: "first answer" };
      if (i === 2) return { text: "never sent", hold: hold.promise };
      return text("after interrupt");
    });
    const { handle, result } = run(request());
    await waitUntil(() => server.requests.length === 1, "first request");
    await handle.send("steer: look at src", "steer");
    await handle.send("follow: now summarize", "followUp");
    gate.resolve();
    await waitUntil(() => server.requests.length >= 2, "second request");
    // steer: the user message right after the tool result, before the second call
    const second = server.requests[1]!.body.messages;
    expect(second.at(-1)).toMatchObject({ role: "user", content: "steer: look at src" });
    expect(second.at(-2)!.role).toBe("tool");
    expect(second.some((m) => m.content === "follow: now summarize")).toBe(false);
    // followUp: after the final answer, another turn
    await waitUntil(() => server.requests.length === 3, "follow-up request");
    const third = server.requests[2]!.body.messages;
    expect(third.at(-2)).toMatchObject({ role: "assistant", content: "first answer" });
    expect(third.at(-1)).toMatchObject({ role: "user", content: "follow: now summarize" });
    // interrupt: aborts the held request, then the message starts a new turn
    await handle.send("stop, do this instead", "interrupt");
    const r = await result;
    expect(server.requests[2]!.aborted).toBe(true);
    expect(server.requests[3]!.body.messages.at(-1)).toMatchObject({ role: "user", content: "stop, do this instead" });
    expect(r.status).toBe("completed");
    expect(r.text).toBe("after interrupt");
    const transcript = readFileSync(r.transcriptPath!, "utf8");
    expect(transcript).toContain("Message (interrupt)");
    expect(transcript).toContain("Message (steer)");
  });

  test("interrupt during a tool run drops the unfinished tool calls, then delivers", async () => {
    server.setScript((_req, i) =>
      i === 0
        ? { toolCalls: [{ name: "bash", arguments: { command: "sleep 30" } }, { name: "list", arguments: {} }], usage: { prompt: 1, completion: 1 } }
        : text("ok"),
    );
    const { handle, result, events } = run(request());
    await waitUntil(() => events.some((e) => e.type === "tool_start"), "bash to start");
    await handle.send("never mind", "interrupt");
    const r = await result;
    expect(r.status).toBe("completed");
    const msgs = server.requests[1]!.body.messages;
    // the assistant message lost both unanswered calls; no tool results; the message follows
    const assistant = msgs.filter((m) => m.role === "assistant").at(-1)!;
    expect(assistant.tool_calls).toBeUndefined();
    expect(msgs.some((m) => m.role === "tool")).toBe(false);
    expect(msgs.at(-1)).toMatchObject({ role: "user", content: "never mind" });
  });

  test("wrap-up for a spending cap: the running tool is killed, no call follows, the stage ends with what the agent said", async () => {
    server.setScript(inOrder({ ...toolCall("bash", { command: "sleep 60 & sleep 60" }), text: "checking", usage: { prompt: 10, completion: 5, cost: 0.0002 } }, text("never asked")));
    const { handle, result, events } = run(request());
    await waitUntil(() => events.some((e) => e.type === "tool_start"), "bash to start");
    await waitUntil(() => liveGroupCount() === 1, "bash group");
    handle.wrapUp!("Budget used up: answer now with what you have.", "spending");
    const r = await result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("checking");
    expect(server.requests).toHaveLength(1);
    expect(r.usage).toMatchObject({ inputTokens: 10, outputTokens: 5, costMicroUsd: 200, turns: 1 });
    await waitUntil(() => liveGroupCount() === 0, "no group left");
  });

  test("wrap-up for the time limit: the request in flight is aborted and one last call without tools ends the stage", async () => {
    server.setScript((req, i) => (i === 0 ? { ...toolCall("list", {}), hold: new Promise(() => {}) } : text("wrapped up")));
    const { handle, result } = run(request());
    await waitUntil(() => server.requests.length === 1, "first request");
    handle.wrapUp!("Budget used up: answer now with what you have.", "time");
    const r = await result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("wrapped up");
    expect(server.requests[1]!.body.tools).toBeUndefined();
    expect(server.requests[1]!.body.messages.at(-1)!.content).toContain("Budget used up");
  });

  test("cancel ends a stage with a bash command running: cancelled, no process left", async () => {
    server.setScript(inOrder(toolCall("bash", { command: "sleep 60 & sleep 60" }), text("x")));
    const { handle, result, events } = run(request());
    await waitUntil(() => events.some((e) => e.type === "tool_start"), "bash to start");
    await waitUntil(() => liveGroupCount() === 1, "bash group");
    handle.cancel("stop");
    const r = await result;
    expect(r.status).toBe("cancelled");
    await waitUntil(() => liveGroupCount() === 0, "no group left");
    await expect(handle.send("late", "steer")).rejects.toThrow("ended");
  });

  test("messages sent before the stage started come first in its first user turn", async () => {
    const r = await run(request({ initialMessages: [{ id: "m1", text: "remember the milk" }] })).result;
    expect(r.status).toBe("completed");
    expect(server.requests[0]!.body.messages[1]!.content).toContain("Messages received before you started:\n- remember the milk");
  });

  test("max turns ends a loop that never stops", async () => {
    server.setScript(inOrder(toolCall("list", {})));
    const r = await run(request({}, { maxTurns: 3 })).result;
    expect(r.status).toBe("failed");
    expect(r.error!.code).toBe("max_turns");
    expect(server.requests.length).toBe(3);
  });
});

function req0Dir(r: StageResult): string {
  return r.transcriptPath!.replace(/\/transcript\.md$/, "");
}
