/**
 * One streamed chat-completions call, and retries around it.
 *
 * The request asks for `stream: true` and `stream_options.include_usage`.
 * Its body comes serialized (`requestJson`): the caller keeps the history's
 * JSON as it grows rather than re-serializing every message every turn.
 * The SSE body is split into records on LF only (a CR before it is
 * dropped); every `data:` payload is handed to `onRaw` before it is parsed
 * (the raw event log), then folded:
 * - `delta.content` → text (and `onText`);
 * - `delta.tool_calls[]` → tool calls accumulated BY INDEX: id and name on
 *   a call's first chunk, argument fragments concatenated. Servers that omit
 *   ids get generated ones; servers that put every call at index 0 with a
 *   new id start a new call whenever the id changes;
 * - a chunk with `usage` (its `choices` may be `[]` or `null`) → usage;
 * - `finish_reason` → how the turn ended.
 * A body that ends without `[DONE]` and without a finish reason was cut
 * off: provider_bad_response (retried). A payload that is not JSON:
 * provider_bad_response too.
 *
 * `callWithRetries` retries retryable provider errors (429, 5xx, network,
 * bad responses) up to `maxRetries` times, honouring Retry-After, and never
 * retries once the caller aborted.
 */

import { Http1Client, type HttpReply } from "./http1.ts";
import { ProviderError, classifyHttpError, networkError, retryDelay } from "./provider-errors.ts";

export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface ChatUsage {
  prompt: number;
  completion: number;
  cached: number;
  cacheWrite: number;
  /** OpenRouter's `cost` (USD), when sent. */
  costUsd?: number;
}

export interface ChatTurn {
  content: string;
  toolCalls: ToolCall[];
  finishReason: string | null;
  usage?: ChatUsage;
  model?: string;
}

export interface ChatEndpoint {
  baseUrl: string;
  apiKey: string | undefined;
  requestTimeoutMs: number;
}

export interface StreamHandlers {
  onRaw?(payload: string): void;
  onText?(delta: string): void;
}

/** A serialized chat request: `json` is the whole body; `model` names the model in error messages. */
export interface ChatRequest {
  model: string | undefined;
  json: string;
}

/**
 * The body of a streamed chat request, byte for byte
 * `JSON.stringify({ model, messages, tools?, stream: true, stream_options: { include_usage: true } })`
 * with `messagesJson` and `toolsJson` already serialized (`toolsJson` undefined: no tools field).
 */
export function requestJson(model: string, messagesJson: string, toolsJson: string | undefined): string {
  return `{"model":${JSON.stringify(model)},"messages":${messagesJson},${toolsJson === undefined ? "" : `"tools":${toolsJson},`}"stream":true,"stream_options":{"include_usage":true}}`;
}

let generated = 0;
/** Decodes whole lines only (never `stream: true`): stateless, so one serves every call. */
const decoder = new TextDecoder();
/** The abort reason of a call that ran past the request timeout (told apart from the caller's aborts). */
const TIMED_OUT = Object.freeze({ name: "TimeoutError", message: "timed out" });

/**
 * The calls of one stage to one endpoint: the URL and headers are worked
 * out once. A call's AbortController belongs to that call alone (see
 * `callWithRetries`): its owner aborts it to interrupt the call, and the
 * request timeout aborts it too (with a reason of its own), so nothing has
 * to be linked to anything per call.
 */
export class ChatClient {
  readonly url: string;
  private readonly headers: Record<string, string>;
  /** Plain http: without a proxy: this thread's own HTTP/1.1 client (http1.ts); otherwise fetch. */
  private readonly http: Http1Client | undefined;
  private readonly path: string;

  constructor(private readonly endpoint: ChatEndpoint) {
    this.url = `${endpoint.baseUrl.replace(/\/+$/, "")}/chat/completions`;
    this.headers = { "content-type": "application/json", accept: "text/event-stream" };
    if (endpoint.apiKey) this.headers.authorization = `Bearer ${endpoint.apiKey}`;
    const parsed = URL.canParse(this.url) ? new URL(this.url) : undefined;
    this.path = parsed ? `${parsed.pathname}${parsed.search}` : "";
    this.http = parsed?.protocol === "http:" && !parsed.username && !proxied() ? new Http1Client(parsed) : undefined;
  }

  async stream(body: ChatRequest, ctl: AbortController, h: StreamHandlers): Promise<ChatTurn> {
    const timer = setTimeout(() => ctl.abort(TIMED_OUT), this.endpoint.requestTimeoutMs);
    try {
      return await readReply(this.post(body.json, ctl.signal), this.url, body, ctl.signal, h);
    } finally {
      clearTimeout(timer);
    }
  }

  private post(json: string, signal: AbortSignal): Promise<HttpReply> {
    return this.http ? this.http.post(this.path, this.headers, json, signal) : fetchPost(this.url, this.headers, json, signal);
  }
}

/** An HTTP proxy is configured for plain http: (fetch honours it; http1.ts does not speak to proxies). */
function proxied(): boolean {
  return Boolean(process.env.http_proxy || process.env.HTTP_PROXY);
}

/** fetch, seen as an HttpReply. */
async function fetchPost(url: string, headers: Record<string, string>, body: string, signal: AbortSignal): Promise<HttpReply> {
  const res = await fetch(url, { method: "POST", headers, body, signal });
  return {
    status: res.status,
    headers: res.headers,
    async pipe(onChunk) {
      if (!res.body) return;
      const reader = res.body.getReader();
      let ended = false;
      try {
        for (;;) {
          const chunk = await reader.read();
          if (chunk.done) {
            ended = true;
            return;
          }
          onChunk(chunk.value);
        }
      } finally {
        // A body read to its end needs neither releaseLock nor cancel; one left mid-way is cancelled (the connection is dropped).
        if (!ended) await reader.cancel().catch(() => {});
      }
    },
    text: () => res.text(),
  };
}

/** The error to throw when the call's signal was aborted: the caller's reason, or a retryable timeout. */
function abortError(signal: AbortSignal, url: string, err: unknown): unknown {
  if (signal.reason === TIMED_OUT) return networkError(TIMED_OUT, url);
  return signal.reason ?? err;
}

async function readReply(posted: Promise<HttpReply>, url: string, body: ChatRequest, signal: AbortSignal, h: StreamHandlers): Promise<ChatTurn> {
  let res: HttpReply;
  try {
    res = await posted;
  } catch (err) {
    throw signal.aborted ? abortError(signal, url, err) : networkError(err, url);
  }
  if (res.status < 200 || res.status > 299) {
    const text = await res.text().catch(() => "");
    throw classifyHttpError(res.status, text, res.headers, body.model);
  }

  const turn: ChatTurn = { content: "", toolCalls: [], finishReason: null };
  /** Made on the first tool-call fragment (most replies have none). */
  let toolCalls: ToolCallFolder | undefined;
  let done = false;
  const onPayload = (payload: string) => {
    if (done) return;
    h.onRaw?.(payload);
    if (payload === "[DONE]") {
      done = true;
      return;
    }
    let chunk: ChunkShape;
    try {
      chunk = JSON.parse(payload) as ChunkShape;
    } catch {
      throw new ProviderError("provider_bad_response", `the provider sent malformed JSON in its stream: ${payload.slice(0, 120)}`);
    }
    if (chunk.error) {
      const m = typeof chunk.error === "string" ? chunk.error : (chunk.error.message ?? JSON.stringify(chunk.error));
      throw new ProviderError("provider_unavailable", `the provider reported an error mid-stream: ${String(m).slice(0, 200)}`);
    }
    if (chunk.model && !turn.model) turn.model = chunk.model;
    if (chunk.usage) turn.usage = readUsage(chunk.usage);
    for (const choice of chunk.choices ?? []) {
      const delta = choice.delta ?? choice.message;
      if (delta?.content) {
        turn.content += delta.content;
        h.onText?.(delta.content);
      }
      if (delta?.tool_calls) {
        toolCalls ??= new ToolCallFolder(turn.toolCalls);
        for (const tc of delta.tool_calls) toolCalls.add(tc);
      }
      if (choice.finish_reason) turn.finishReason = choice.finish_reason;
    }
  };

  const events = new SseEvents(onPayload);
  try {
    // After [DONE], the body is still read to its end: a drained reply lets the connection be reused.
    await res.pipe((bytes) => events.push(bytes));
  } catch (err) {
    if (err instanceof ProviderError) throw err;
    if (signal.aborted) throw abortError(signal, url, err);
    throw new ProviderError("provider_bad_response", `the provider's stream broke off (${(err as Error).message ?? err})`);
  }
  events.end();
  if (!done && turn.finishReason === null) {
    throw new ProviderError("provider_bad_response", "the provider's stream ended before the reply was complete");
  }
  return turn;
}

/**
 * Server-sent events from body bytes: each event's data (its `data:` lines
 * joined by LF) goes to `onPayload`. Lines end at LF (a CR before it is
 * dropped); other fields (event:, id:, comments) carry nothing we use.
 * Lines are found in the bytes and only a data line's value is decoded: a
 * long stream then makes one short string per event, never big chunk
 * strings that substrings keep alive (memory stays flat over 50,000
 * deltas; bench/agents.ts).
 */
class SseEvents {
  /** Bytes of an unfinished line from the previous chunk. */
  private carry: Uint8Array | undefined;
  /** Data lines of the event being read (almost always exactly one: no array for it). */
  private data: string | undefined;
  private more: string[] | undefined;

  constructor(private readonly onPayload: (payload: string) => void) {}

  push(chunk: Uint8Array): void {
    let bytes = chunk;
    if (this.carry) {
      const joined = new Uint8Array(this.carry.length + bytes.length);
      joined.set(this.carry);
      joined.set(bytes, this.carry.length);
      bytes = joined;
      this.carry = undefined;
    }
    let start = 0;
    let nl: number;
    while ((nl = bytes.indexOf(10, start)) >= 0) {
      const end = nl > start && bytes[nl - 1] === 13 ? nl - 1 : nl;
      if (end === start) this.endEvent();
      else if (end - start >= 5 && bytes[start] === 100 && bytes[start + 1] === 97 && bytes[start + 2] === 116 && bytes[start + 3] === 97 && bytes[start + 4] === 58) {
        const value = decoder.decode(bytes.subarray(start + (bytes[start + 5] === 32 ? 6 : 5), end));
        if (this.data === undefined) this.data = value;
        else (this.more ??= []).push(value);
      }
      start = nl + 1;
    }
    if (start < bytes.length) this.carry = bytes.slice(start);
  }

  /** The body ended: a last line without its LF, and the event being read, count. */
  end(): void {
    if (this.carry) {
      const tail = decoder.decode(this.carry);
      this.carry = undefined;
      if (tail.startsWith("data:") && this.data === undefined) this.data = tail.slice(tail.startsWith("data: ") ? 6 : 5);
    }
    this.endEvent();
  }

  private endEvent(): void {
    if (this.data === undefined) return;
    const payload = this.more ? [this.data, ...this.more].join("\n") : this.data;
    this.data = undefined;
    this.more = undefined;
    this.onPayload(payload);
  }
}

export interface RetryOptions {
  maxRetries: number;
  maxBackoffMs: number;
  /** Called before each wait (for the transcript and diagnostics). */
  onRetry?(err: ProviderError, attempt: number, delayMs: number): void;
}

/**
 * Runs `call` until it succeeds, a fresh AbortController per attempt
 * (handed to `onAttempt` first, so the owner can abort whichever attempt
 * is current, the waits between attempts included). An attempt aborted by
 * its owner is never retried; one that timed out is (provider_unavailable).
 */
export async function callWithRetries<T>(call: (ctl: AbortController) => Promise<T>, opts: RetryOptions & { onAttempt(ctl: AbortController): void }): Promise<T> {
  let ctl = new AbortController();
  opts.onAttempt(ctl);
  for (let attempt = 1; ; attempt++) {
    try {
      return await call(ctl);
    } catch (err) {
      const ownerAborted = ctl.signal.aborted && ctl.signal.reason !== TIMED_OUT;
      if (ownerAborted || !(err instanceof ProviderError) || !err.retryable || attempt > opts.maxRetries) throw err;
      const delay = retryDelay(attempt, err, opts.maxBackoffMs);
      opts.onRetry?.(err, attempt, delay);
      ctl = new AbortController();
      opts.onAttempt(ctl);
      await abortableSleep(delay, ctl.signal);
    }
  }
}

function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** Folds tool-call fragments into whole calls (appended to `calls` as each one starts). */
class ToolCallFolder {
  private readonly byIndex = new Map<number, ToolCall>();
  /** Ids made up here for calls the server sent without one. */
  private readonly generatedIds = new Set<string>();
  constructor(private readonly calls: ToolCall[]) {}

  add(tc: ToolCallDelta): void {
    const index = typeof tc.index === "number" ? tc.index : 0;
    let call = this.byIndex.get(index);
    const startsNew =
      !call ||
      // every call at index 0, told apart by their ids
      (tc.id !== undefined && tc.id !== "" && tc.id !== call.id && !this.generatedIds.has(call.id)) ||
      // no ids at all: a new name after complete arguments is a new call
      (tc.function?.name !== undefined && tc.function.name !== "" && call.name !== "" && isCompleteJson(call.arguments));
    if (startsNew || !call) {
      const id = tc.id || `call_gen_${++generated}`;
      if (!tc.id) this.generatedIds.add(id);
      call = { id, name: "", arguments: "" };
      this.byIndex.set(index, call);
      this.calls.push(call);
    } else if (tc.id && this.generatedIds.has(call.id)) {
      // the id came after the first fragment: adopt it
      this.generatedIds.delete(call.id);
      call.id = tc.id;
    }
    if (tc.function?.name) call.name += tc.function.name;
    if (tc.function?.arguments) call.arguments += tc.function.arguments;
  }
}

interface ChunkShape {
  model?: string;
  error?: { message?: string } | string;
  usage?: Record<string, unknown> | null;
  choices?: {
    delta?: { content?: string | null; tool_calls?: ToolCallDelta[] };
    message?: { content?: string | null; tool_calls?: ToolCallDelta[] };
    finish_reason?: string | null;
  }[] | null;
}

interface ToolCallDelta {
  index?: number;
  id?: string;
  function?: { name?: string; arguments?: string };
}

function isCompleteJson(text: string): boolean {
  if (text.trim() === "") return false;
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

function readUsage(u: Record<string, unknown>): ChatUsage {
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
  const details = (u.prompt_tokens_details ?? {}) as Record<string, unknown>;
  const out: ChatUsage = {
    prompt: num(u.prompt_tokens),
    completion: num(u.completion_tokens),
    cached: num(details.cached_tokens),
    cacheWrite: num(details.cache_write_tokens),
  };
  if (typeof u.cost === "number") out.costUsd = u.cost;
  return out;
}
