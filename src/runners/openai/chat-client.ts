/**
 * One streamed chat-completions call, and retries around it.
 *
 * Every request goes through `fetch` (proxies, TLS, keep-alive: the
 * runtime's). The request asks for `stream: true` and
 * `stream_options.include_usage`. Its body comes serialized
 * (`requestJson`): the caller keeps the history's JSON as it grows rather
 * than re-serializing every message every turn. The reply's server-sent
 * events are read as they arrive (sse.ts: eventsource-parser, bounded
 * buffers); every event's data is handed to `onRaw` before it is parsed
 * (the raw event log), then folded:
 * - `delta.content` → text (and `onText`);
 * - `delta.tool_calls[]` → tool calls accumulated BY INDEX: id and name on
 *   a call's first chunk, argument fragments concatenated. Servers that omit
 *   ids get generated ones; servers that put every call at index 0 with a
 *   new id start a new call whenever the id changes;
 * - a chunk with `usage` (its `choices` may be `[]` or `null`) → usage;
 * - `finish_reason` → how the turn ended;
 * - an `error` payload, or an event named `error` → provider_unavailable.
 * A body that ends without `[DONE]` and without a finish reason was cut
 * off: provider_bad_response (retried). A payload that is not JSON:
 * provider_bad_response too. So is a reply whose text and tool-call
 * arguments together grow past STREAM_CAP_BYTES characters (sse.ts says
 * why that cap): it is cut off there instead of growing the worker's
 * memory. An error reply's body is read up to ERROR_BODY_BYTES only.
 *
 * `callWithRetries` retries retryable provider errors (429, 5xx, network,
 * bad responses) up to `maxRetries` times, honouring Retry-After, and never
 * retries once the caller aborted.
 */

import type { SharedRateLimits } from "../rate-limits.ts";
import { ProviderError, classifyHttpError, networkError, parseRetryAfter, retryDelay } from "./provider-errors.ts";
import { STREAM_CAP_BYTES, capExceeded, readBoundedText, readEvents, type SseEvent } from "./sse.ts";

/** An error reply's message is all we use of its body (one line of it): a runaway error body is not read. */
const ERROR_BODY_BYTES = 64 * 1024;

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
  /** Rate limits shared with every stage of this host (rate-limits.ts): waited for before each call, fed by each 429 / Retry-After. */
  rateLimits?: SharedRateLimits;
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
  /** Milliseconds waited so far for the shared rate limits before calls (the caller takes differences). */
  rateLimitWaitedMs = 0;

  constructor(private readonly endpoint: ChatEndpoint) {
    this.url = `${endpoint.baseUrl.replace(/\/+$/, "")}/chat/completions`;
    this.headers = { "content-type": "application/json", accept: "text/event-stream" };
    if (endpoint.apiKey) this.headers.authorization = `Bearer ${endpoint.apiKey}`;
  }

  async stream(body: ChatRequest, ctl: AbortController, h: StreamHandlers): Promise<ChatTurn> {
    const timer = setTimeout(() => ctl.abort(TIMED_OUT), this.endpoint.requestTimeoutMs);
    try {
      return await this.call(body, ctl.signal, h);
    } finally {
      clearTimeout(timer);
    }
  }

  private async call(body: ChatRequest, signal: AbortSignal, h: StreamHandlers): Promise<ChatTurn> {
    let res: Response;
    const limits = this.endpoint.rateLimits;
    const key = limits?.key(this.endpoint.baseUrl, body.model);
    let release = () => {};
    try {
      if (limits && key) release = await limits.acquire(key, signal, (ms) => (this.rateLimitWaitedMs += ms));
      res = await fetch(this.url, { method: "POST", headers: this.headers, body: body.json, signal });
    } catch (err) {
      release();
      throw signal.aborted ? abortError(signal, this.url, err) : networkError(err, this.url);
    }
    if (limits && key && (res.status === 429 || (!res.ok && res.headers.has("retry-after")))) limits.backOff(key, parseRetryAfter(res.headers.get("retry-after")));
    release();
    if (!res.ok) {
      const text = await readBoundedText(res.body, ERROR_BODY_BYTES).catch(() => "");
      throw classifyHttpError(res.status, text, res.headers, body.model);
    }
    const folder = new ReplyFolder(h);
    try {
      // After [DONE], the body is still read to its end: a drained reply lets the connection be reused.
      if (res.body) await readEvents(res.body, (e) => folder.event(e));
    } catch (err) {
      if (err instanceof ProviderError) throw err;
      if (signal.aborted) throw abortError(signal, this.url, err);
      throw new ProviderError("provider_bad_response", `the provider's stream broke off (${(err as Error).message ?? err})`);
    }
    return folder.finish();
  }
}

/** The error to throw when the call's signal was aborted: the caller's reason, or a retryable timeout. */
function abortError(signal: AbortSignal, url: string, err: unknown): unknown {
  if (signal.reason === TIMED_OUT) return networkError(TIMED_OUT, url);
  return signal.reason ?? err;
}

/** Folds a reply's events into one turn, as they arrive. */
class ReplyFolder {
  private readonly turn: ChatTurn = { content: "", toolCalls: [], finishReason: null };
  /** Made on the first tool-call fragment (most replies have none). */
  private toolCalls: ToolCallFolder | undefined;
  private done = false;
  /** Characters of text and tool-call arguments kept so far (bounded: see the file's header). */
  private kept = 0;

  constructor(private readonly h: StreamHandlers) {}

  event(e: SseEvent): void {
    if (this.done) return;
    const payload = e.data;
    this.h.onRaw?.(payload);
    if (payload === "[DONE]") {
      this.done = true;
      return;
    }
    let chunk: ChunkShape;
    try {
      chunk = JSON.parse(payload) as ChunkShape;
    } catch {
      if (e.event === "error") throw midStreamError(payload);
      throw new ProviderError("provider_bad_response", `the provider sent malformed JSON in its stream: ${payload.slice(0, 120)}`);
    }
    if (chunk.error) throw midStreamError(typeof chunk.error === "string" ? chunk.error : (chunk.error.message ?? JSON.stringify(chunk.error)));
    if (e.event === "error") throw midStreamError(payload);
    const turn = this.turn;
    if (chunk.model && !turn.model) turn.model = chunk.model;
    if (chunk.usage) turn.usage = readUsage(chunk.usage);
    for (const choice of chunk.choices ?? []) {
      const delta = choice.delta ?? choice.message;
      if (delta?.content) {
        this.keep(delta.content.length);
        turn.content += delta.content;
        this.h.onText?.(delta.content);
      }
      if (delta?.tool_calls) {
        this.toolCalls ??= new ToolCallFolder(turn.toolCalls);
        for (const tc of delta.tool_calls) {
          this.keep((tc.function?.arguments?.length ?? 0) + (tc.function?.name?.length ?? 0));
          this.toolCalls.add(tc);
        }
      }
      if (choice.finish_reason) turn.finishReason = choice.finish_reason;
    }
  }

  /** The body ended: the turn, if it is complete. */
  finish(): ChatTurn {
    if (!this.done && this.turn.finishReason === null) {
      throw new ProviderError("provider_bad_response", "the provider's stream ended before the reply was complete");
    }
    return this.turn;
  }

  private keep(chars: number): void {
    this.kept += chars;
    if (this.kept > STREAM_CAP_BYTES) throw capExceeded("a reply", STREAM_CAP_BYTES);
  }
}

function midStreamError(message: unknown): ProviderError {
  return new ProviderError("provider_unavailable", `the provider reported an error mid-stream: ${String(message).slice(0, 200)}`);
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
