/**
 * A fake OpenAI Responses API for the real `codex` CLI (fake-provider.ts
 * holds the scripting, the request log and the trap; docs/design/runners.md says how
 * codex is pointed at it):
 *
 *   const fake = await startFakeResponses();
 *   fake.push(shell("echo hi"), say("done", { input: 300, cached: 200, output: 20 }));
 *
 * `POST /v1/responses` streams SSE: response.created, the text as
 * output_text deltas inside a message item, function_call items (codex's
 * shell tool is `exec_command {cmd}`), then response.completed with usage
 * (input_tokens includes cached and cache-written ones, both under
 * input_tokens_details). A reply can instead be an HTTP error (status, the
 * API's error body, headers such as Retry-After) or a response.failed
 * event inside the stream.
 */

import { sse, startFakeProvider, streamResponse, type FakeProvider } from "./fake-provider.ts";

export interface ResponsesUsage {
  input: number;
  output: number;
  cached?: number;
  cacheWrite?: number;
}

export interface ResponsesReply {
  text?: string | string[];
  calls?: { name?: string; namespace?: string; args: Record<string, unknown> }[];
  usage?: ResponsesUsage;
  /** An HTTP error instead of a stream. */
  status?: number;
  headers?: Record<string, string>;
  /** The API's error (the body of an HTTP error, or of a response.failed event with `failed`). */
  error?: { type?: string; code?: string; message: string };
  /** A response.failed event after the text instead of response.completed. */
  failed?: boolean;
  /** Hold the reply until this resolves (or the client goes away). */
  hold?: Promise<unknown>;
}

export type FakeResponses = FakeProvider<ResponsesReply>;

export const DEFAULT_USAGE: ResponsesUsage = { input: 100, output: 10 };

export const say = (text: string | string[], usage: ResponsesUsage = DEFAULT_USAGE): ResponsesReply => ({ text, usage });
export const shell = (cmd: string, usage: ResponsesUsage = DEFAULT_USAGE): ResponsesReply => ({ calls: [{ args: { cmd } }], usage });
export const httpError = (status: number, message: string, headers: Record<string, string> = {}, type = "invalid_request_error"): ResponsesReply => ({ status, headers, error: { type, message } });
export const streamFailure = (message: string, partial = "Partial"): ResponsesReply => ({ text: partial, failed: true, error: { code: "server_error", message } });

let seq = 0;

export function startFakeResponses(): Promise<FakeResponses> {
  return startFakeProvider<ResponsesReply>({
    handles: (req) => req.method === "POST" && req.path === "/v1/responses",
    fallback: say("(the fake provider has no reply scripted)", { input: 1, output: 1 }),
    async respond(reply, _req, signal) {
      if (reply.hold) await Promise.race([reply.hold, new Promise((r) => signal.addEventListener("abort", r))]);
      if (reply.status) return Response.json({ error: { type: "api_error", ...reply.error } }, { status: reply.status, headers: reply.headers });
      return streamResponse(events(reply), signal);
    },
  });
}

function events(reply: ResponsesReply): string[] {
  const id = `resp_${++seq}`;
  const ev = (data: { type: string }) => sse(data.type, data);
  const out = [ev({ type: "response.created", response: { id, object: "response", status: "in_progress", output: [] } } as { type: string })];
  const items: unknown[] = [];
  const texts = reply.text === undefined ? [] : Array.isArray(reply.text) ? reply.text : [reply.text];
  if (texts.length) {
    const itemId = `msg_${seq}`;
    out.push(ev({ type: "response.output_item.added", output_index: 0, item: { type: "message", id: itemId, role: "assistant", status: "in_progress", content: [] } } as { type: string }));
    for (const delta of texts) out.push(ev({ type: "response.output_text.delta", item_id: itemId, output_index: 0, content_index: 0, delta } as { type: string }));
    const item = { type: "message", id: itemId, role: "assistant", status: "completed", content: [{ type: "output_text", text: texts.join(""), annotations: [] }] };
    items.push(item);
    out.push(ev({ type: "response.output_item.done", output_index: 0, item } as { type: string }));
  }
  for (const c of reply.calls ?? []) {
    const n = ++seq;
    const item = { type: "function_call", id: `fc_${n}`, call_id: `call_${n}`, name: c.name ?? "exec_command", ...(c.namespace ? { namespace: c.namespace } : {}), arguments: JSON.stringify(c.args), status: "completed" };
    items.push(item);
    out.push(ev({ type: "response.output_item.added", output_index: items.length - 1, item: { ...item, arguments: "", status: "in_progress" } } as { type: string }));
    out.push(ev({ type: "response.output_item.done", output_index: items.length - 1, item } as { type: string }));
  }
  if (reply.failed) {
    out.push(ev({ type: "response.failed", response: { id, object: "response", status: "failed", error: reply.error ?? { code: "server_error", message: "failed" }, output: items } } as { type: string }));
    return out;
  }
  const u = reply.usage ?? DEFAULT_USAGE;
  const usage = {
    input_tokens: u.input,
    input_tokens_details: { cached_tokens: u.cached ?? 0, ...(u.cacheWrite !== undefined ? { cache_write_tokens: u.cacheWrite } : {}) },
    output_tokens: u.output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: u.input + u.output,
  };
  out.push(ev({ type: "response.completed", response: { id, object: "response", status: "completed", output: items, usage } } as { type: string }));
  return out;
}
