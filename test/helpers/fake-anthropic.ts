/**
 * A fake Anthropic Messages API for the real `claude` CLI (fake-provider.ts
 * holds the scripting, the request log and the trap):
 *
 *   const fake = await startFakeAnthropic();
 *   fake.push(toolUse("Bash", { command: "echo hi" }), text("done", { input: 20, output: 5 }));
 *   ... ANTHROPIC_BASE_URL = fake.url ...
 *
 * `POST /v1/messages` streams SSE as the real API does: message_start
 * (input and cache usage), content_block_start/delta/stop per text or
 * tool_use block (tool input as input_json_delta fragments), message_delta
 * (stop_reason and the output tokens) and message_stop. A non-streaming
 * request (Claude's fallback after a broken stream) gets the same reply as
 * one JSON message. A reply can instead be an HTTP error (status, the API's
 * error body, headers such as Retry-After) or an `error` event in the
 * middle of the stream. `HEAD /` (Claude's connectivity probe) answers 200.
 */

import { sse, startFakeProvider, streamResponse, type FakeProvider, type LoggedRequest } from "./fake-provider.ts";

export interface AnthropicUsage {
  input: number;
  output: number;
  cacheRead?: number;
  cacheWrite?: number;
}

export interface AnthropicReply {
  text?: string | string[];
  tools?: { name: string; input: Record<string, unknown>; id?: string }[];
  usage?: AnthropicUsage;
  model?: string;
  /** An HTTP error instead of a reply. */
  status?: number;
  headers?: Record<string, string>;
  /** The API's error type and message (the body of an HTTP error, or of the stream's error event). */
  error?: { type: string; message: string };
  /** Send an `error` event after the first text block instead of ending the message. */
  streamError?: boolean;
  /** Hold the reply until this resolves (or the client goes away). */
  hold?: Promise<unknown>;
}

export type FakeAnthropic = FakeProvider<AnthropicReply>;

export const DEFAULT_USAGE: AnthropicUsage = { input: 10, output: 5 };

export function text(t: string | string[], usage: AnthropicUsage = DEFAULT_USAGE): AnthropicReply {
  return { text: t, usage };
}

export function toolUse(name: string, input: Record<string, unknown>, usage: AnthropicUsage = DEFAULT_USAGE): AnthropicReply {
  return { tools: [{ name, input }], usage };
}

export function httpError(status: number, type: string, message: string, headers: Record<string, string> = {}): AnthropicReply {
  return { status, error: { type, message }, headers };
}

export function streamError(type: string, message: string, partial = "Partial"): AnthropicReply {
  return { text: partial, streamError: true, error: { type, message } };
}

export const isMessagesCall = (req: LoggedRequest) => req.method === "POST" && req.path === "/v1/messages";

export function startFakeAnthropic(): Promise<FakeAnthropic> {
  return startFakeProvider<AnthropicReply>({
    handles: isMessagesCall,
    other: (req) => (req.method === "HEAD" || (req.method === "GET" && req.path === "/") ? new Response(null, { status: 200 }) : undefined),
    fallback: text("(the fake provider has no reply scripted)"),
    async respond(reply, req, signal) {
      if (reply.hold) await Promise.race([reply.hold, new Promise((r) => signal.addEventListener("abort", r))]);
      if (reply.status) {
        const error = reply.error ?? { type: "api_error", message: `fake error ${reply.status}` };
        return Response.json({ type: "error", error }, { status: reply.status, headers: reply.headers });
      }
      const model = reply.model ?? req.body?.model ?? "claude-fake";
      if (req.body?.stream !== true) {
        // The non-streaming fallback after a broken stream meets the same trouble (an overloaded provider).
        if (reply.streamError) return Response.json({ type: "error", error: reply.error }, { status: 529 });
        return Response.json(message(reply, model));
      }
      return streamResponse(events(reply, model), signal);
    },
  });
}

let seq = 0;

function usageOf(u: AnthropicUsage) {
  return { input_tokens: u.input, cache_creation_input_tokens: u.cacheWrite ?? 0, cache_read_input_tokens: u.cacheRead ?? 0, output_tokens: u.output };
}

function blocks(reply: AnthropicReply): ({ type: "text"; text: string } | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> })[] {
  const texts = reply.text === undefined ? [] : [Array.isArray(reply.text) ? reply.text.join("") : reply.text];
  return [...texts.map((t) => ({ type: "text" as const, text: t })), ...(reply.tools ?? []).map((t) => ({ type: "tool_use" as const, id: t.id ?? `toolu_fake${++seq}`, name: t.name, input: t.input }))];
}

function message(reply: AnthropicReply, model: string) {
  const content = blocks(reply);
  const stop = content.some((b) => b.type === "tool_use") ? "tool_use" : "end_turn";
  return { id: `msg_fake${++seq}`, type: "message", role: "assistant", model, content, stop_reason: stop, stop_sequence: null, usage: usageOf(reply.usage ?? DEFAULT_USAGE) };
}

function events(reply: AnthropicReply, model: string): string[] {
  const u = usageOf(reply.usage ?? DEFAULT_USAGE);
  const m = message(reply, model);
  const out = [sse("message_start", { type: "message_start", message: { ...m, content: [], stop_reason: null, usage: { ...u, output_tokens: 1 } } })];
  m.content.forEach((b, index) => {
    if (b.type === "text") {
      out.push(sse("content_block_start", { type: "content_block_start", index, content_block: { type: "text", text: "" } }));
      const parts = Array.isArray(reply.text) ? reply.text : [b.text];
      for (const t of parts) out.push(sse("content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text: t } }));
      if (reply.streamError) {
        out.push(sse("error", { type: "error", error: reply.error ?? { type: "overloaded_error", message: "Overloaded" } }));
        return;
      }
    } else {
      out.push(sse("content_block_start", { type: "content_block_start", index, content_block: { type: "tool_use", id: b.id, name: b.name, input: {} } }));
      const json = JSON.stringify(b.input);
      const half = Math.ceil(json.length / 2);
      for (const part of [json.slice(0, half), json.slice(half)]) out.push(sse("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: part } }));
    }
    out.push(sse("content_block_stop", { type: "content_block_stop", index }));
  });
  if (reply.streamError) return out.slice(0, out.findIndex((e) => e.startsWith("event: error")) + 1);
  out.push(sse("message_delta", { type: "message_delta", delta: { stop_reason: m.stop_reason, stop_sequence: null }, usage: u }));
  out.push(sse("message_stop", { type: "message_stop" }));
  return out;
}
