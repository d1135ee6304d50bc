/**
 * The core of the fake model providers that real agent CLIs are pointed at
 * (fake-anthropic.ts; the other APIs' fakes can be built on it): real HTTP
 * on 127.0.0.1 (Bun.serve on a free port), a per-test script of replies,
 * a log of every request, and a trap for anything else.
 *
 * - Script: a queue of replies (`push`), each taken by the next request the
 *   format's `handles(req)` accepts; when the queue is empty `fallback`
 *   answers. A reply may also be a function of the request (to look at
 *   what the CLI sent, or to hold until a test lets it go).
 * - Log: every request (method, path, headers, parsed body), in order;
 *   `callMatching` resolves when a model call that matches has arrived.
 * - Trap: the CLI gets HTTP(S)_PROXY pointing at a second listener that
 *   accepts nothing: every connection to it is recorded (`strays`), so a
 *   CLI that tries to reach anything but the fake (telemetry, update
 *   checks, model lists) is seen by `assertOnlyFake()`. Requests to the
 *   fake that no route handles are recorded the same way.
 */

import { Arrivals } from "./arrivals.ts";

export interface LoggedRequest {
  method: string;
  path: string;
  search: string;
  headers: Headers;
  /** The body parsed as JSON, or the text when it is not JSON. */
  body: any;
}

export interface FormatSpec<R> {
  /** The requests that take a scripted reply (the model calls). */
  handles(req: LoggedRequest): boolean;
  /** Other requests this format answers itself (probes); undefined: not handled, a stray. */
  other?(req: LoggedRequest): Response | undefined;
  /** The HTTP response for one reply. `signal` ends when the client goes away. */
  respond(reply: R, req: LoggedRequest, signal: AbortSignal): Response | Promise<Response>;
  /** The reply when the queue is empty. */
  fallback: R;
}

export type Scripted<R> = R | ((req: LoggedRequest) => R | Promise<R>);

export interface FakeProvider<R> {
  url: string;
  port: number;
  /** Every request, in order. */
  requests: LoggedRequest[];
  /** The requests that took scripted replies. */
  calls: LoggedRequest[];
  /** Connections to the trap and unhandled requests: "proxy connection", "GET /x". */
  strays: string[];
  /** The first model call (received so far or still to come) that `match` accepts. */
  callMatching(match?: (req: LoggedRequest) => boolean): Promise<LoggedRequest>;
  /** Queue replies for the next model calls. */
  push(...replies: Scripted<R>[]): void;
  /** Environment variables that send every other connection of the CLI to the trap. */
  proxyEnv(): Record<string, string>;
  /** Throws when anything but the scripted model calls and known probes reached us or the trap. */
  assertOnlyFake(): void;
  /** For a failure message: every request in order, a model call with the end of its last message, and the replies still queued. */
  describe(): string;
  close(): Promise<void>;
}

export async function startFakeProvider<R>(spec: FormatSpec<R>): Promise<FakeProvider<R>> {
  const queue: Scripted<R>[] = [];
  const requests: LoggedRequest[] = [];
  const arrivals = new Arrivals<LoggedRequest>();
  const calls = arrivals.items;
  const strays: string[] = [];
  const trap = Bun.listen({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(socket) {
        strays.push("proxy connection");
        socket.end();
      },
      data() {},
    },
  });
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      const text = req.method === "GET" || req.method === "HEAD" ? "" : await req.text();
      let body: unknown = text;
      try {
        body = text ? JSON.parse(text) : undefined;
      } catch {
        // not JSON: kept as text
      }
      const logged: LoggedRequest = { method: req.method, path: url.pathname, search: url.search, headers: req.headers, body };
      requests.push(logged);
      if (!spec.handles(logged)) {
        const answer = spec.other?.(logged);
        if (answer) return answer;
        strays.push(`${req.method} ${url.pathname}`);
        return new Response("not found", { status: 404 });
      }
      arrivals.add(logged);
      const next = queue.shift() ?? spec.fallback;
      const reply = typeof next === "function" ? await (next as (r: LoggedRequest) => R | Promise<R>)(logged) : next;
      return spec.respond(reply, logged, req.signal);
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    port: server.port!,
    requests,
    calls,
    strays,
    callMatching: (match) => arrivals.first(match),
    push: (...replies) => void queue.push(...replies),
    proxyEnv: () => {
      const proxy = `http://127.0.0.1:${trap.port}`;
      return { HTTPS_PROXY: proxy, HTTP_PROXY: proxy, https_proxy: proxy, http_proxy: proxy, NO_PROXY: "127.0.0.1,localhost", no_proxy: "127.0.0.1,localhost" };
    },
    assertOnlyFake() {
      if (strays.length) throw new Error(`the CLI connected elsewhere than the fake provider: ${strays.join(", ")}`);
    },
    describe() {
      const lines = requests.map((r, i) => `#${i + 1} ${r.method} ${r.path}${calls.includes(r) ? ` (model call; last message: ${lastMessage(r.body)})` : ""}`);
      return `the fake provider got ${requests.length} requests, ${calls.length} model calls, ${queue.length} replies still queued${strays.length ? `, strays: ${strays.join(", ")}` : ""}:\n${lines.join("\n")}`;
    },
    async close() {
      trap.stop(true);
      await server.stop(true);
    },
  };
}

/** The end of a model call's last message (Anthropic/chat `messages`, Responses `input`, Gemini `contents`), at most 400 characters. */
export function lastMessage(body: any): string {
  const messages = body?.messages ?? body?.input ?? body?.contents;
  const last = JSON.stringify(Array.isArray(messages) ? messages.at(-1) : (messages ?? body)) ?? "";
  return last.length > 400 ? `…${last.slice(-400)}` : last;
}

/** One SSE event. */
export function sse(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** A streamed response from chunks, ending early when the client goes away; `hold` delays the stream's start. */
export function streamResponse(chunks: string[], signal: AbortSignal, hold?: Promise<unknown>): Response {
  const encoder = new TextEncoder();
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (hold) {
        await Promise.race([hold, new Promise((r) => signal.addEventListener("abort", r))]);
        hold = undefined;
      }
      const next = chunks.shift();
      if (next === undefined || signal.aborted) return controller.close();
      controller.enqueue(encoder.encode(next));
    },
  });
  return new Response(stream, { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } });
}
