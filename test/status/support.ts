/**
 * Shared pieces of the status server tests: the Hono app over a real
 * journal (driven through `app.request()`, no socket), and a reader for
 * server-sent event streams.
 */

import { createParser } from "eventsource-parser";
import type { Hono } from "hono";
import type { Journal } from "../../src/journal/journal.ts";
import { createStatusApp } from "../../src/status/app.ts";
import { journalControl } from "../../src/status/control.ts";
import { HostPolicy } from "../../src/status/security.ts";
import { StatusSource } from "../../src/status/source.ts";
import type { StreamOptions } from "../../src/status/stream-hub.ts";

export const TOKEN = "test-token-0123456789abcdef";
export const ORIGIN = "http://127.0.0.1:4317";

/** Streams poll fast in tests so live events arrive quickly. */
export const FAST_STREAMS: Partial<StreamOptions> = { pollMs: 15, heartbeatMs: 5_000, idleCloseMs: 50, settledEvery: 3 };

export interface StatusFixture {
  app: Hono;
  source: StatusSource;
  /** A request on the bound address with the bearer token (unless `init` names an Authorization header). */
  req(path: string, init?: RequestInit): Promise<Response>;
  /** A request with no credentials at all. */
  anon(path: string, init?: RequestInit): Promise<Response>;
  post(path: string, body: unknown, token?: string | null): Promise<Response>;
  close(): Promise<void>;
}

export function statusFixture(journal: Journal, stream: Partial<StreamOptions> = FAST_STREAMS): StatusFixture {
  const source = new StatusSource(journal, { stream });
  const app = createStatusApp({ source, control: journalControl(journal), token: TOKEN, hosts: new HostPolicy("127.0.0.1", 4317) });
  const anon = (path: string, init?: RequestInit) => Promise.resolve(app.request(`${ORIGIN}${path}`, init));
  const req = (path: string, init: RequestInit = {}) => {
    const headers = new Headers(init.headers);
    if (!headers.has("authorization")) headers.set("authorization", `Bearer ${TOKEN}`);
    return anon(path, { ...init, headers });
  };
  return {
    app,
    source,
    req,
    anon,
    post(path, body, token = TOKEN) {
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (token !== null) headers.authorization = `Bearer ${token}`;
      return anon(path, { method: "POST", headers, body: typeof body === "string" ? body : JSON.stringify(body) });
    },
    close: () => source.close(),
  };
}

export async function json<T = Record<string, any>>(res: Response): Promise<T> {
  return (await res.json()) as T;
}

export interface SseMessage {
  id: string | undefined;
  event: string;
  data: string;
}

/**
 * Reads an SSE body message by message (parsed by eventsource-parser, as the
 * product's own SSE reader is). Comments (heartbeats) are counted, not
 * returned. `next()` resolves with the next message, or undefined when the
 * stream ended; it fails after `timeoutMs`. A read that a timeout gave up
 * waiting for is kept: the next call takes its chunk, none is lost.
 */
export function sseReader(body: ReadableStream<Uint8Array>) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let comments = 0;
  let ended = false;
  const queue: SseMessage[] = [];
  const parser = createParser({
    onEvent: (e) => queue.push({ id: e.id, event: e.event ?? "message", data: e.data }),
    onComment: () => comments++,
  });
  let pending: ReturnType<typeof reader.read> | undefined;

  async function fill(timeoutMs: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no SSE data within ${timeoutMs} ms`)), timeoutMs);
    });
    pending ??= reader.read();
    try {
      const { value, done } = await Promise.race([pending, timeout]);
      pending = undefined;
      if (done) {
        ended = true;
        return;
      }
      parser.feed(decoder.decode(value, { stream: true }));
    } finally {
      clearTimeout(timer);
    }
  }

  return {
    get comments() {
      return comments;
    },
    get ended() {
      return ended;
    },
    async next(timeoutMs = 10_000): Promise<SseMessage | undefined> {
      while (queue.length === 0 && !ended) await fill(timeoutMs);
      return queue.shift();
    },
    /** Messages until `pred` holds for one (included). */
    async until(pred: (m: SseMessage) => boolean, timeoutMs = 20_000): Promise<SseMessage[]> {
      const out: SseMessage[] = [];
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const m = await this.next(Math.max(1, deadline - Date.now()));
        if (!m) throw new Error(`stream ended before the awaited message; got ${out.length}`);
        out.push(m);
        if (pred(m)) return out;
      }
    },
    async waitForComment(timeoutMs = 10_000): Promise<void> {
      const start = comments;
      const deadline = Date.now() + timeoutMs;
      while (comments === start) {
        if (ended) throw new Error("stream ended");
        await fill(Math.max(1, deadline - Date.now()));
      }
    },
    cancel: () => reader.cancel().catch(() => {}),
  };
}

export interface JournalMessage {
  runId: string;
  path: string;
  seq: number;
  type: string;
  key: string | null;
  payload: { childRunId?: string; kind?: string } | null;
}

export function journalData(m: SseMessage): JournalMessage {
  return JSON.parse(m.data) as JournalMessage;
}
