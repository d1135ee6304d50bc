/**
 * Server-sent event streams of runs: one TreeFeed (shared poller) per
 * streamed run, created on the first client and closed a little after the
 * last one leaves; each client is a byte stream the feed writes to.
 */

import type { Journal } from "../journal/journal.ts";
import type { RunId } from "../shared/ids.ts";
import type { LiveHub } from "./live-hub.ts";
import { TreeFeed, type FeedClient, type FeedOptions, type StartAt } from "./tree-feed.ts";

export interface StreamOptions extends FeedOptions {
  /** Bytes a client may fall behind before it is dropped (it then reconnects and catches up). */
  maxBacklogBytes: number;
}

export const DEFAULT_STREAM_OPTIONS: StreamOptions = {
  pollMs: 100,
  heartbeatMs: 5_000,
  settledEvery: 10,
  idleCloseMs: 2_000,
  maxBacklogBytes: 8 * 1024 * 1024,
};

const encoder = new TextEncoder();

export class StreamHub {
  private readonly feeds = new Map<string, Promise<TreeFeed>>();
  private closing = false;

  constructor(
    private readonly journal: Journal,
    readonly opts: StreamOptions = DEFAULT_STREAM_OPTIONS,
    /** The server's live subscription: streams carry their runs' live events too (none without it). */
    private readonly live?: LiveHub,
  ) {}

  /**
   * An SSE body for `runId` starting at `from`, or why the cursor cannot
   * resume it. `signal` ends the stream when the request goes away.
   */
  async open(runId: RunId, from: StartAt, signal?: AbortSignal): Promise<ReadableStream<Uint8Array> | { error: string; stopping?: true }> {
    if (this.closing) return { error: "the status server is stopping", stopping: true };
    let feed = await this.feed(runId);
    if (feed.closed) feed = await this.feed(runId);
    const problem = feed.checkCursor(from);
    if (problem) return { error: problem };
    const { client, stream } = sseClient(feed, this.opts.maxBacklogBytes);
    signal?.addEventListener("abort", () => client.close(), { once: true });
    feed.join(client, from);
    return stream;
  }

  /** Runs being polled now (one feed per streamed run, however many clients). */
  get feedCount(): number {
    return this.feeds.size;
  }

  /** Live clients over every feed (for tests and benchmarks). */
  async clientCount(): Promise<number> {
    let n = 0;
    for (const f of this.feeds.values()) n += (await f).clientCount;
    return n;
  }

  /** Ends every stream; with `drain`, each feed first sends what the journal has now. */
  async close(drain: boolean): Promise<void> {
    this.closing = true;
    const feeds = await Promise.all([...this.feeds.values()].map((f) => f.catch(() => undefined)));
    await Promise.all(feeds.map((f) => (f ? (drain ? f.drainAndClose() : Promise.resolve(f.close())) : undefined)));
    this.feeds.clear();
  }

  private feed(runId: RunId): Promise<TreeFeed> {
    let feed = this.feeds.get(runId);
    if (!feed) {
      feed = TreeFeed.open(
        this.journal,
        runId,
        this.opts,
        () => {
          if (this.feeds.get(runId) === feed) this.feeds.delete(runId);
        },
        this.live,
      );
      this.feeds.set(runId, feed);
      feed.catch(() => this.feeds.delete(runId));
    }
    return feed;
  }
}

function sseClient(feed: TreeFeed, maxBacklog: number): { client: FeedClient; stream: ReadableStream<Uint8Array> } {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let done = false;
  const client: FeedClient = {
    write(bytes) {
      if (done) return false;
      controller.enqueue(bytes);
      return (controller.desiredSize ?? 0) > -maxBacklog;
    },
    close() {
      if (done) return;
      done = true;
      feed.leave(client);
      try {
        controller.close();
      } catch {
        // already closed or cancelled by the reader
      }
    },
  };
  const stream = new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c;
        // Sent at once so the client sees the stream open; `retry` sets its reconnection delay.
        c.enqueue(encoder.encode("retry: 1000\n: stream open\n\n"));
      },
      cancel() {
        client.close();
      },
    },
    { highWaterMark: 64 * 1024, size: (chunk) => chunk?.byteLength ?? 0 },
  );
  return { client, stream };
}
