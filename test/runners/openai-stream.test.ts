/**
 * The openai runner's streamed replies, read through fetch and
 * eventsource-parser, against the fake server writing the body byte for
 * byte (and, where a reply is not HTTP or must stop mid-body, a scripted
 * TCP server): the SSE grammar (CR and CRLF line ends split anywhere,
 * `event:` and `id:` fields, comments, a BOM, a stream that never sends a
 * newline), the bounds of a runaway stream (an endless line, event, reply
 * or error body is cut off at a cap and fails as provider_bad_response,
 * retried), and what the hand-written HTTP client's tests covered that
 * still matters through fetch: a reply that is not HTTP, an abort in the
 * middle of a body, a cancel before any request, a 429's Retry-After (a
 * refused connect is in openai.test.ts).
 */

import type { Socket } from "bun";
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { STREAM_CAP_BYTES } from "../../src/runners/openai/sse.ts";
import type { RunnerEvent, StageRequest } from "../../src/runners/types.ts";
import { waitUntil } from "../engine/helpers.ts";
import { inOrder, text, type FakeOpenAI, type Reply } from "../helpers/fake-openai.ts";
import { closeStage, openStage, runStage, stageRequest, type OpenAIStage } from "../helpers/openai-stage.ts";

let stage: OpenAIStage;
let server: FakeOpenAI;
const stops: (() => void)[] = [];

beforeEach(async () => {
  stage = await openStage();
  server = stage.server;
});

afterEach(async () => {
  for (const stop of stops.splice(0)) stop();
  await closeStage(stage);
});

const request = (agent: StageRequest["agent"] = {}) => stageRequest(stage, {}, agent);
const run = (req: StageRequest) => runStage(req);

/** One chat.completion.chunk's JSON. */
function chunk(delta: Record<string, unknown>, finish: string | null = null): string {
  return JSON.stringify({ id: "c", object: "chat.completion.chunk", model: "fake-model", choices: [{ index: 0, delta, finish_reason: finish }] });
}

const deltas = (r: { events: RunnerEvent[] }) => r.events.filter((e) => e.type === "text_delta").map((e) => (e as { text: string }).text);

describe("the SSE grammar", () => {
  test("CR and CRLF line ends (split between chunks), event: and id: fields, comments and a BOM: every delta comes through", async () => {
    server.setScript(
      inOrder({
        raw: [
          "\uFEFF: a comment first\r\n",
          `event: message\r\nid: 1\r\ndata: ${chunk({ content: "Hel" })}\r\n\r\n`,
          // bare CR line ends
          `: keep-alive\rdata: ${chunk({ content: "lo " })}\r\r`,
          // a CRLF split between two chunks, and an event split inside its data
          `data: ${chunk({ content: "wor" })}\r`,
          `\n\r\ndata: ${chunk({ content: "ld" }).slice(0, 20)}`,
          `${chunk({ content: "ld" }).slice(20)}\n\n`,
          // a data field with no space after the colon, split over two data lines (joined by LF: still JSON)
          `data:${chunk({}, "stop").slice(0, 10)}\ndata:${chunk({}, "stop").slice(10)}\n\n`,
          "retry: 1000\nid: 9\n\ndata: [DONE]\r\n\r\n",
        ],
      }),
    );
    const r = run(request());
    const result = await r.result;
    expect(result.error).toBeUndefined();
    expect(result.status).toBe("completed");
    expect(result.text).toBe("Hello world");
    expect(deltas(r)).toEqual(["Hel", "lo ", "wor", "ld"]);
    // the raw event log holds each event's data as sent
    const raw = readFileSync(result.eventsPath!, "utf8");
    expect(raw).toContain(chunk({ content: "lo " }));
    expect(raw).toContain("[DONE]");
    expect(server.requests.length).toBe(1);
  });

  test("an event named error fails the request as provider_unavailable, with the provider's words; the retry's reply is used", async () => {
    server.setScript(inOrder({ raw: [`data: ${chunk({ content: "start" })}\n\n`, 'event: error\ndata: {"message":"model overloaded"}\n\n'] }, text("after the error")));
    const result = await run(request()).result;
    expect(result.status).toBe("completed");
    expect(result.text).toBe("after the error");
    expect(readFileSync(result.errorPath!, "utf8")).toMatch(/retry 1 .*provider_unavailable: the provider reported an error mid-stream: .*model overloaded/);
  });

  test("a stream that never sends a newline: a short one is read at its end; one that goes on is cut off at the cap", async () => {
    server.setScript(inOrder({ raw: [`data: ${chunk({ content: "one line" }, "stop")}`] }));
    const short = await run(request()).result;
    expect(short.status).toBe("completed");
    expect(short.text).toBe("one line");

    server.setScript(inOrder({ raw: [`data: ${chunk({ content: "" }).slice(0, 40)}`], repeat: "x".repeat(64 * 1024) }));
    const endless = await run(request({ maxRetries: 1, requestTimeoutMs: 60_000 })).result;
    expect(endless.status).toBe("failed");
    expect(endless.error).toEqual({ code: "provider_bad_response", message: "the provider's stream sent a line or event over 4 MiB; the request was cut off there" });
    expect(server.requests.length).toBe(3); // the short one, then the endless one retried once, as any bad response
    for (const req of server.requests.slice(1)) await waitUntil(() => req.aborted, "the client drops the runaway stream");
  });
});

describe("bounded buffers", () => {
  const cases: [string, Reply, string][] = [
    ["an endless event (data lines, never a blank line)", { repeat: "data: more of the same event\n" }, "a line or event"],
    ["an endless line that is no SSE field (the parser drops it; the cap still ends the request)", { raw: ["garbage"], repeat: "z".repeat(64 * 1024) }, "a line or event"],
    ["a reply that never ends (valid deltas, never a finish)", { repeat: `data: ${chunk({ content: "y".repeat(4096) })}\n\n` }, "a reply"],
  ];
  for (const [name, reply, what] of cases) {
    test(`${name}: cut off at ${STREAM_CAP_BYTES / 1024 / 1024} MiB, provider_bad_response, retried`, async () => {
      server.setScript(inOrder(reply));
      const result = await run(request({ maxRetries: 1, requestTimeoutMs: 60_000 })).result;
      expect(result.status).toBe("failed");
      expect(result.error).toEqual({ code: "provider_bad_response", message: `the provider's stream sent ${what} over 4 MiB; the request was cut off there` });
      expect(server.requests.length).toBe(2);
      for (const req of server.requests) {
        await waitUntil(() => req.aborted, "the client drops the runaway stream");
        // what the server got out before the client stopped reading: the cap and what sockets buffer, not more
        expect(req.bytesSent).toBeLessThan(STREAM_CAP_BYTES + 32 * 1024 * 1024);
      }
    });
  }

  test("an error reply whose body never ends: its status counts, the body is read up to 64 KiB only", async () => {
    server.setScript(inOrder({ status: 503, repeat: "overloaded ".repeat(1000) }, text("recovered")));
    const result = await run(request({ requestTimeoutMs: 60_000 })).result;
    expect(result.status).toBe("completed");
    expect(result.text).toBe("recovered");
    expect(readFileSync(result.errorPath!, "utf8")).toMatch(/retry 1 .*provider_unavailable: the provider is unavailable \(HTTP 503\): overloaded overloaded/);
    await waitUntil(() => server.requests[0]!.aborted, "the client drops the endless error body");
  });
});

interface TcpConn {
  id: number;
  socket: Socket<{ id: number }>;
}

/** A TCP server on 127.0.0.1 that calls `onRequest` once per connection, at its first bytes; records closed connections. */
function tcpServer(onRequest: (conn: TcpConn) => void) {
  let conns = 0;
  const closed: number[] = [];
  const listener = Bun.listen<{ id: number; seen: boolean }>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(s) {
        s.data = { id: ++conns, seen: false };
      },
      data(s) {
        if (s.data.seen) return;
        s.data.seen = true;
        onRequest({ id: s.data.id, socket: s });
      },
      close(s) {
        closed.push(s.data.id);
      },
    },
  });
  stops.push(() => listener.stop(true));
  return {
    url: `http://127.0.0.1:${listener.port}/v1`,
    closed,
    get connections() {
      return conns;
    },
  };
}

describe("through fetch", () => {
  test("a server that does not speak HTTP: provider_unavailable, retried, one line naming the endpoint", async () => {
    const tcp = tcpServer(({ socket }) => {
      socket.write("SSH-2.0-OpenSSH_9.2\r\n\r\n");
      socket.end();
    });
    const result = await run(request({ baseUrl: tcp.url, maxRetries: 1 })).result;
    expect(result.status).toBe("failed");
    expect(result.error!.code).toBe("provider_unavailable");
    expect(result.error!.message).toStartWith(`cannot reach the provider at ${tcp.url}/chat/completions (`);
    expect(result.error!.message).not.toContain("\n");
    expect(tcp.connections).toBe(2);
  });

  test("an interrupt in the middle of a streamed body drops the connection; what came is kept, the next turn goes on", async () => {
    const sse = (s: string) => `${s.length.toString(16)}\r\n${s}\r\n`;
    const tcp = tcpServer(({ id, socket }) => {
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
      if (id === 1) {
        socket.write(sse(`data: ${chunk({ content: "first half" })}\n\n`)); // then nothing: the model is "thinking"
        return;
      }
      socket.write(sse(`data: ${chunk({ content: "second turn" }, "stop")}\n\ndata: [DONE]\n\n`));
      socket.write("0\r\n\r\n");
    });
    const r = run(request({ baseUrl: tcp.url }));
    await waitUntil(() => deltas(r).includes("first half"), "the first delta reaches the stage");
    await r.handle.send("change of plan", "interrupt");
    const result = await r.result;
    expect(result.status).toBe("completed");
    expect(result.text).toBe("second turn");
    expect(deltas(r)).toEqual(["first half", "second turn"]);
    await waitUntil(() => tcp.closed.includes(1), "the interrupted connection is dropped");
    const transcript = readFileSync(result.transcriptPath!, "utf8");
    expect(transcript).toContain("first half");
    expect(transcript).toContain("(turn interrupted: the provider reported no usage for it, so it is not counted)");
  });

  test("a stage cancelled before its first call sends nothing", async () => {
    const r = run(request());
    r.handle.cancel("changed my mind");
    const result = await r.result;
    expect(result.status).toBe("cancelled");
    expect(result.error).toEqual({ code: "cancelled", message: "changed my mind" });
    expect(server.requests.length).toBe(0);
  });

  test("a 429 with Retry-After: the wait is the provider's (capped by maxBackoffMs), then the reply is used", async () => {
    server.setScript(inOrder({ status: 429, headers: { "retry-after": "1" } }, text("after waiting")));
    const result = await run(request({ maxBackoffMs: 5_000 })).result;
    expect(result.status).toBe("completed");
    expect(result.text).toBe("after waiting");
    expect(readFileSync(result.errorPath!, "utf8")).toContain("retry 1 in 1000 ms after provider_rate_limit");
  });
});
