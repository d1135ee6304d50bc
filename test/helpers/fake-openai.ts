/**
 * A fake OpenAI-compatible chat-completions server for tests: real HTTP on
 * 127.0.0.1 (Bun.serve on a free port), scripted streamed replies.
 *
 *   const server = await startFakeOpenAI((req, n) => n === 0 ? toolCall("list", {}) : text("done"));
 *   ... ATOMIC_OPENAI_BASE_URL = server.url ...
 *   await server.close();
 *
 * A reply can be: streamed text (in chunks), tool calls (arguments split
 * across chunks, parallel calls, ids omitted, every call at index 0), a
 * usage chunk (with `choices: []` or `choices: null`, OpenRouter's `cost`),
 * an HTTP error with headers (429 + Retry-After, 500, 401, ...), a stream
 * cut off before its end, malformed JSON, or a reply held until a promise
 * resolves or the client aborts, or paced like a model (its chunks spread
 * over `paceMs`), or a body given byte for byte (`raw`, for
 * the SSE grammar: CR line ends, comments, no newline at all), optionally
 * followed by one chunk repeated until the client goes away (`repeat`, a
 * runaway provider; sent as the client reads, so the server's memory stays
 * flat too). What it billed is summed (`billed`: the scripted usage of
 * every reply it began, as a provider charges a call it took even when the
 * client goes away before the end). Every request is recorded (body, headers, bytes sent),
 * `requestMatching` resolves when one that matches has arrived (an event
 * to wait on, not a poll), and the server counts requests in flight
 * (`maxConcurrent`).
 */

import { Arrivals } from "./arrivals.ts";
import { lastMessage } from "./fake-provider.ts";

export interface ToolCallSpec {
  name: string;
  arguments: string | Record<string, unknown>;
  id?: string;
}

export interface Reply {
  /** Text content, streamed in the given chunks (a string: one chunk). */
  text?: string | string[];
  toolCalls?: ToolCallSpec[];
  /** Split each call's arguments into this many chunks (default 3). */
  argChunks?: number;
  /** Send calls without ids (Ollama). */
  omitIds?: boolean;
  /** Put every call at index 0, told apart by id. */
  allAtIndexZero?: boolean;
  /** The usage chunk; null: none (no include_usage support). */
  usage?: { prompt: number; completion: number; cached?: number; cost?: number } | null;
  /** `choices: null` on the usage chunk instead of `[]`. */
  nullChoicesOnUsage?: boolean;
  /** An HTTP error instead of a stream. */
  status?: number;
  headers?: Record<string, string>;
  body?: string;
  /** End the stream after the first content chunk, without finish_reason or [DONE]. */
  cutOff?: boolean;
  /** Send a data line that is not JSON. */
  malformed?: boolean;
  /** The stream's body exactly as given, chunk by chunk, instead of the scripted events. */
  raw?: string[];
  /** After `raw` (if any; no scripted events), this chunk again and again until the client goes away. */
  repeat?: string;
  /** Hold the reply until this resolves (or the client goes away). */
  hold?: Promise<unknown>;
  /** Spread the stream's chunks evenly over this many ms (a model's latency): the first at once, the last at the end. */
  paceMs?: number;
  model?: string;
}

export interface RecordedRequest {
  body: {
    model?: string;
    messages: { role: string; content: string | null; tool_calls?: { id: string; function: { name: string; arguments: string } }[]; tool_call_id?: string }[];
    tools?: { function: { name: string; parameters: unknown } }[];
    stream?: boolean;
    stream_options?: { include_usage?: boolean };
  };
  headers: Headers;
  /** Set when the client aborted this request before its reply ended. */
  aborted: boolean;
  /** Bytes of the reply's body sent so far. */
  bytesSent: number;
}

/** `index` counts requests since the script was set. */
export type Script = (req: RecordedRequest, index: number) => Reply | Promise<Reply>;

export interface FakeOpenAI {
  /** Base URL, ending in /v1. */
  url: string;
  port: number;
  requests: RecordedRequest[];
  inFlight: number;
  maxConcurrent: number;
  /** What the replies begun so far charged: integer micro-dollars (`usage.cost`) and tokens (prompt + completion). */
  billed: { costMicroUsd: number; tokens: number };
  setScript(script: Script): void;
  /** The first request (recorded so far or still to come) that `match` accepts. */
  requestMatching(match?: (req: RecordedRequest) => boolean): Promise<RecordedRequest>;
  /** For a failure message: every request in order, with the end of its last message. */
  describe(): string;
  close(): Promise<void>;
}

export function text(t: string | string[], usage: Reply["usage"] = { prompt: 10, completion: 5 }): Reply {
  return { text: t, usage };
}

export function toolCall(name: string, args: Record<string, unknown> | string, extra: Partial<Reply> = {}): Reply {
  return { toolCalls: [{ name, arguments: args }], usage: { prompt: 10, completion: 5 }, ...extra };
}

/** A script that plays replies in order (the last one repeats). */
export function inOrder(...replies: Reply[]): Script {
  return (_req, i) => replies[Math.min(i, replies.length - 1)]!;
}

/** `hostname`: where it listens (default 127.0.0.1; a fleet's bridge address for hosts in network namespaces). */
export async function startFakeOpenAI(script: Script, opts: { hostname?: string } = {}): Promise<FakeOpenAI> {
  const hostname = opts.hostname ?? "127.0.0.1";
  let current = script;
  let count = 0;
  const state = { inFlight: 0, maxConcurrent: 0 };
  const billed = { costMicroUsd: 0, tokens: 0 };
  const arrivals = new Arrivals<RecordedRequest>();
  const requests = arrivals.items;
  const encoder = new TextEncoder();

  const server = Bun.serve({
    hostname,
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      if (req.method === "GET" && url.pathname.endsWith("/models")) return Response.json({ data: [{ id: "fake-model" }] });
      if (req.method !== "POST" || !url.pathname.endsWith("/chat/completions")) return new Response("not found", { status: 404 });
      const recorded: RecordedRequest = { body: (await req.json()) as RecordedRequest["body"], headers: req.headers, aborted: false, bytesSent: 0 };
      arrivals.add(recorded);
      const index = count++;
      state.inFlight++;
      state.maxConcurrent = Math.max(state.maxConcurrent, state.inFlight);
      let released = false;
      const release = () => {
        if (!released) {
          released = true;
          state.inFlight--;
        }
      };
      req.signal.addEventListener("abort", () => {
        recorded.aborted = true;
        release();
      });
      let reply: Reply;
      try {
        reply = await current(recorded, index);
        if (reply.hold) await Promise.race([reply.hold, new Promise((r) => req.signal.addEventListener("abort", r))]);
      } catch (err) {
        release();
        return new Response(String(err), { status: 500 });
      }
      if (req.signal.aborted) {
        release();
        return new Response("aborted", { status: 499 });
      }
      if (reply.usage && !reply.status) {
        billed.costMicroUsd += Math.round((reply.usage.cost ?? 0) * 1_000_000);
        billed.tokens += reply.usage.prompt + reply.usage.completion;
      }
      if (reply.status && reply.repeat === undefined) {
        release();
        return new Response(reply.body ?? JSON.stringify({ error: { message: `fake error ${reply.status}` } }), {
          status: reply.status,
          headers: { "content-type": "application/json", ...reply.headers },
        });
      }
      const chunks = reply.raw || reply.repeat !== undefined ? [...(reply.raw ?? [])] : sseChunks(reply, recorded.body.model ?? "fake-model");
      const paced = { start: performance.now(), total: chunks.length, sent: 0 };
      const stream = new ReadableStream<Uint8Array>({
        async pull(controller) {
          if (reply.paceMs && paced.sent > 0 && chunks.length > 0) {
            const due = paced.start + (reply.paceMs * paced.sent) / Math.max(1, paced.total - 1);
            const wait = due - performance.now();
            if (wait > 0) await Bun.sleep(wait);
          }
          paced.sent++;
          const next = chunks.shift() ?? reply.repeat;
          if (next === undefined || req.signal.aborted) {
            release();
            controller.close();
            return;
          }
          const bytes = encoder.encode(next);
          recorded.bytesSent += bytes.length;
          controller.enqueue(bytes);
        },
        cancel() {
          release();
        },
      });
      if (reply.status) return new Response(stream, { status: reply.status, headers: { "content-type": "text/plain", ...reply.headers } });
      return new Response(stream, { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } });
    },
  });

  return {
    url: `http://${hostname}:${server.port}/v1`,
    port: server.port!,
    requests,
    billed,
    get inFlight() {
      return state.inFlight;
    },
    get maxConcurrent() {
      return state.maxConcurrent;
    },
    setScript(s) {
      current = s;
      count = 0;
    },
    requestMatching: (match) => arrivals.first(match),
    describe: () => `the fake OpenAI server got ${requests.length} requests:\n${requests.map((r, i) => `#${i + 1}${r.aborted ? " (aborted)" : ""} last message: ${lastMessage(r.body)}`).join("\n")}`,
    async close() {
      await server.stop(true);
    },
  };
}

let callSeq = 0;

function sseChunks(reply: Reply, model: string): string[] {
  const out: string[] = [];
  const base = { id: "chatcmpl-fake", object: "chat.completion.chunk", created: 1, model: reply.model ?? model };
  const data = (obj: unknown) => `data: ${JSON.stringify(obj)}\n\n`;
  out.push(data({ ...base, choices: [{ index: 0, delta: { role: "assistant" }, finish_reason: null }] }));
  const texts = reply.text === undefined ? [] : Array.isArray(reply.text) ? reply.text : [reply.text];
  for (const t of texts) {
    out.push(data({ ...base, choices: [{ index: 0, delta: { content: t }, finish_reason: null }] }));
    if (reply.cutOff) return out;
  }
  if (reply.malformed) {
    out.push("data: {\"choices\": [ this is not json\n\n");
    return out;
  }
  const calls = reply.toolCalls ?? [];
  calls.forEach((call, i) => {
    const args = typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments);
    const parts = splitInto(args, reply.argChunks ?? 3);
    const id = reply.omitIds ? undefined : (call.id ?? `call_${++callSeq}`);
    const index = reply.allAtIndexZero ? 0 : i;
    parts.forEach((part, p) => {
      const fn = p === 0 ? { name: call.name, arguments: part } : { arguments: part };
      const tc = p === 0 || reply.allAtIndexZero ? { index, ...(id ? { id } : {}), ...(p === 0 ? { type: "function" } : {}), function: fn } : { index, function: fn };
      out.push(data({ ...base, choices: [{ index: 0, delta: { tool_calls: [tc] }, finish_reason: null }] }));
    });
  });
  out.push(data({ ...base, choices: [{ index: 0, delta: {}, finish_reason: calls.length ? "tool_calls" : "stop" }] }));
  if (reply.usage) {
    const u = reply.usage;
    out.push(
      data({
        ...base,
        choices: reply.nullChoicesOnUsage ? null : [],
        usage: {
          prompt_tokens: u.prompt,
          completion_tokens: u.completion,
          total_tokens: u.prompt + u.completion,
          ...(u.cached !== undefined ? { prompt_tokens_details: { cached_tokens: u.cached } } : {}),
          ...(u.cost !== undefined ? { cost: u.cost } : {}),
        },
      }),
    );
  }
  out.push("data: [DONE]\n\n");
  return out;
}

function splitInto(text: string, n: number): string[] {
  if (n <= 1 || text.length < n) return [text];
  const size = Math.ceil(text.length / n);
  const parts: string[] = [];
  for (let i = 0; i < text.length; i += size) parts.push(text.slice(i, i + size));
  return parts;
}
