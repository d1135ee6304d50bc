/**
 * Server-sent events from a streamed reply body, parsed by eventsource-parser
 * (the WHATWG event-stream grammar: LF, CR and CRLF line ends, `event:`,
 * `id:` and `retry:` fields, comments, a BOM), with bounded buffers.
 *
 * Each event goes to `onEvent` as soon as its blank line arrives, so deltas
 * reach the stage as they stream. One departure from the grammar: an event
 * the body leaves unterminated at its end is still dispatched (some servers
 * end on `data: [DONE]` with no blank line); one cut off in the middle of
 * its JSON then fails as malformed JSON, as any cut-off stream does.
 *
 * Bound: at most STREAM_CAP_BYTES may arrive between one complete event (or
 * comment) and the next. A provider that never sends a newline, or one
 * endless event, would otherwise grow the parser's buffer (or, for a line
 * that is no SSE field, which the parser discards, hold the request open)
 * until the worker runs out of memory; past the cap the request fails as
 * provider_bad_response, retried like any malformed reply. 4 MiB, because
 * no real event comes near it: a chat-completion chunk is well under 1 KiB,
 * and even a whole tool call sent as one chunk is bounded by the largest
 * output limits of current models (about 128k tokens, roughly 0.5 MiB of
 * text, a few times that JSON-escaped); and a worker running several
 * stages can afford a few MiB each, retries included (one at a time).
 *
 * Memory over a long reply: fetch hands the body over in chunks of up to
 * ~100 KiB, each decoded to a string the parser slices events out of;
 * that garbage is left to the collector's own schedule (no forced
 * collections: they served a benchmark's peak-RSS figure, not a user).
 */

import { createParser, type EventSourceMessage } from "eventsource-parser";
import { ProviderError } from "./provider-errors.ts";

export const STREAM_CAP_BYTES = 4 * 1024 * 1024;

/** An event's `data` (its data lines joined by LF) and `event` (its `event:` field; undefined when it named none). */
export type SseEvent = EventSourceMessage;

/** A bound of the stream was passed: what the provider sent is not a usable reply. */
export function capExceeded(what: string, cap: number): ProviderError {
  return new ProviderError("provider_bad_response", `the provider's stream sent ${what} over ${cap / (1024 * 1024)} MiB; the request was cut off there`);
}

/**
 * Reads `body` to its end, handing each event to `onEvent` (an error it
 * throws rejects the read, as it is, and cancels the body). A body left
 * before its end (an error, an abort) is cancelled, which drops the
 * connection.
 */
export async function readEvents(body: ReadableStream<Uint8Array>, onEvent: (event: SseEvent) => void, cap = STREAM_CAP_BYTES): Promise<void> {
  /** Bytes since the last complete event or comment. */
  let pending = 0;
  const parser = createParser({
    onEvent: (e) => {
      pending = 0;
      onEvent(e);
    },
    onComment: () => {
      // Keep-alives (": ping", OpenRouter's ": OPENROUTER PROCESSING") are complete lines: progress.
      pending = 0;
    },
  });
  // One decoder per reply, streaming: a multi-byte character split between two reads is kept whole.
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let ended = false;
  try {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      pending += chunk.value.byteLength;
      if (pending > cap) throw capExceeded("a line or event", cap);
      parser.feed(decoder.decode(chunk.value, { stream: true }));
    }
    ended = true;
    // What the body left unterminated: a last line without its line end, an event without its blank line.
    parser.feed(`${decoder.decode()}\n\n`);
  } finally {
    // A body read to its end needs nothing more; one left mid-way is cancelled (the connection is dropped).
    if (!ended) await reader.cancel().catch(() => {});
  }
}

/** The body as text, at most `limit` bytes of it (an error reply's message; the rest is cancelled unread). */
export async function readBoundedText(body: ReadableStream<Uint8Array> | null, limit: number): Promise<string> {
  if (!body) return "";
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let bytes = 0;
  try {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) return text + decoder.decode();
      const room = limit - bytes;
      bytes += chunk.value.byteLength;
      if (bytes >= limit) return text + decoder.decode(chunk.value.subarray(0, Math.max(0, room)));
      text += decoder.decode(chunk.value, { stream: true });
    }
  } finally {
    if (bytes >= limit) await reader.cancel().catch(() => {});
  }
}
