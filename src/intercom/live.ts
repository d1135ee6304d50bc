/**
 * Live stage events over the broker: the one source of model deltas, tool
 * calls, output and usage for `atomic attach`, the status server's streams
 * and the page (docs/design/live-events.md).
 *
 * - Publishing: the process where a stage's runner runs (a pool worker, or
 *   the root for in-process stages) hands each runner event to a
 *   `LivePublisher`. Events are coalesced per stage attempt for at most
 *   LIVE_FLUSH_MS and sent as one frame to the group `live:<run id>` of the
 *   stage's own run. Nothing is stored: a frame nobody listens to is
 *   dropped by the broker (no session), and a publisher with no broker sends
 *   nothing. The journal keeps the durable record (the stage's transcript
 *   and log files keep all text); live events are only a faster view of it.
 * - The publisher never starts a broker: a watcher does (attach, serve).
 *   While none runs the publisher looks for the broker's socket when it has
 *   an event to send, at most every SOCKET_CHECK_MS, and connects as soon
 *   as one appears. No timer: a worker with no stage, or a stage waiting on
 *   its model, has nothing to send and wakes for nothing (a stat up to
 *   every 20 ms was an eighth of a streaming worker's JavaScript, a 250 ms
 *   timer a wake-up of every idle worker; bench/README.md, agent-stages).
 * - Subscribing: a `LiveSubscriber` registers a session of its own in the
 *   groups of the runs it watches and gets every batch sent to them; given
 *   a shared journal's live channel it also gets the batches worker hosts
 *   relay for those runs (live-remote.ts).
 *
 * Events are the runner's events (runners/types.ts RunnerEvent) as plain
 * JSON plus `at`, the publisher's clock when the event reached it; this
 * file does not know their shapes (the runners sit beside it, docs/design/layers.md).
 */

import { statSync } from "node:fs";
import type { LiveChannelOpener } from "../shared/live-channel.ts";
import { IntercomClient, groupAddress } from "./client.ts";
import { MARK_EVENT, asLiveBatch, liveGroup, liveMarkGroup, markAskOf, type LiveBatch } from "./live-batch.ts";
import { RemoteLiveWatcher } from "./live-remote.ts";

export { MARK_EVENT, asLiveBatch, liveGroup, liveMarkGroup, type LiveBatch, type LiveEvent } from "./live-batch.ts";
import { intercomPaths } from "./paths.ts";

/** How long a stage's events wait for company before they go out. */
export const LIVE_FLUSH_MS = 8;
/** How long events wait for a connection to a broker that just appeared. */
const CONNECT_WAIT_MS = 2_000;
/**
 * How often, at most, a publisher without a broker looks for its socket (on an event). Short: events
 * within this window after a broker appears are dropped (a stat per window is cheap; at 250 ms the
 * first words of a reply that a watcher's broker just came up for were lost, test/live/run-stream-live.test.ts).
 */
const SOCKET_CHECK_MS = 20;
/** The least time between two asks for marks of one run (each marks every stage of the run). */
const MARK_ASK_GAP_MS = 90;
/** Characters of text per frame (the rest of a burst goes in the next frame). */
const MAX_FRAME_TEXT = 256 * 1024;

interface Pending {
  batch: LiveBatch;
  since: number;
  chars: number;
  timer: ReturnType<typeof setTimeout> | undefined;
}

/** A stage attempt being published, and how to put its transcript on disk for a mark (its size then). */
interface Published {
  runId: string;
  stage: string;
  attempt: number;
  mark: (() => number | undefined) | undefined;
}

export class LivePublisher {
  private readonly client: IntercomClient;
  private readonly pending = new Map<string, Pending>();
  private readonly published = new Map<string, Published>();
  /** The session that hears asks for marks, in the mark groups of the runs published now. */
  private readonly name = `live-pub:${process.pid}:${Math.random().toString(36).slice(2, 10)}`;
  private readonly socket: string;
  private socketSeen = 0;
  private lastCheck = 0;
  private closed = false;

  constructor(home: string) {
    this.socket = intercomPaths(home).socket;
    this.client = new IntercomClient({
      home,
      role: "live",
      spawn: false,
      reconnect: true,
      onMessage: (msg) => {
        const runId = markAskOf(msg.body);
        if (runId !== undefined) this.mark((p) => p.runId === runId);
      },
      // Connected (a watcher's broker appeared): a mark in every stream, after the events kept meanwhile. A watcher
      // that asked before this publisher was connected gets its mark without asking again.
      onState: (c) => {
        if (c.to === "open") this.mark(() => true);
      },
    });
    this.client.start();
  }

  /**
   * A sink for one stage attempt's runner events, until `ended`. `mark`: writes the attempt's buffered
   * transcript to disk and says its size (a watcher's mark, docs/design/live-events.md "Marks").
   */
  stage(runId: string, stage: string, attempt: number, mark?: () => number | undefined): (event: { type: string }) => void {
    const key = `${runId}\u0000${stage}\u0000${attempt}`;
    this.published.set(key, { runId, stage, attempt, mark });
    this.joinMarkGroups();
    return (event) => this.push(key, runId, stage, attempt, event);
  }

  /**
   * The stage attempt's events are over: what waits of them goes out now, ahead of the result its process is about
   * to send (a watcher following the run then sees the stage's last events, its usage, before the journal says it
   * ended; on the flush timer they lost that race on a loaded machine, test/live/run-stream-live.test.ts), and it
   * leaves its run's mark group.
   */
  ended(runId: string, stage: string, attempt: number): void {
    const key = `${runId}\u0000${stage}\u0000${attempt}`;
    this.flush(key);
    if (this.published.delete(key)) this.joinMarkGroups();
  }

  private joinMarkGroups(): void {
    if (this.closed) return;
    const runs = new Set([...this.published.values()].map((p) => p.runId));
    // Registered again on every connection (client.ts): a broker that appears later hears of them then.
    const done = runs.size ? this.client.register(this.name, [...runs].map(liveMarkGroup), "live") : this.client.unregister(this.name);
    done.catch(() => {}); // no broker now: nobody asks for marks
  }

  /** A mark in the stream of each attempt published that `which` takes, at once (after what waits of it). */
  private mark(which: (p: Published) => boolean): void {
    for (const [key, p] of this.published) {
      if (!which(p)) continue;
      const bytes = p.mark?.();
      this.push(key, p.runId, p.stage, p.attempt, bytes === undefined ? { type: MARK_EVENT } : ({ type: MARK_EVENT, bytes } as { type: string }));
      this.flush(key);
    }
  }

  private push(key: string, runId: string, stage: string, attempt: number, event: { type: string }): void {
    if (this.closed) return;
    if (!this.client.isOpen) {
      this.lookForBroker();
      if (this.client.state !== "connecting") return; // no broker: nobody watches
    }
    let p = this.pending.get(key);
    if (!p) {
      p = { batch: { live: 1, runId, stage, attempt, events: [] }, since: Date.now(), chars: 0, timer: undefined };
      this.pending.set(key, p);
    }
    const text = (event as { text?: unknown }).text;
    const chars = typeof text === "string" ? text.length : 0;
    const last = p.batch.events.at(-1);
    if (chars > 0 && last && last.type === event.type && event.type === "text_delta" && !(event as { skipped?: number }).skipped) {
      last.text = (last.text as string) + (text as string); // consecutive deltas: one event (keeps the first one's time)
    } else {
      p.batch.events.push({ ...event, at: Date.now() });
    }
    p.chars += chars;
    if (p.chars >= MAX_FRAME_TEXT || event.type === "started") this.flush(key);
    else p.timer ??= setTimeout(() => this.flush(key), LIVE_FLUSH_MS);
  }

  private flush(key: string): void {
    const p = this.pending.get(key);
    if (!p) return;
    clearTimeout(p.timer);
    if (!this.client.isOpen && this.client.state === "connecting" && Date.now() - p.since < CONNECT_WAIT_MS && !this.closed) {
      p.timer = setTimeout(() => this.flush(key), LIVE_FLUSH_MS); // a broker just appeared: keep them for it
      return;
    }
    this.pending.delete(key);
    if (!this.client.isOpen) return;
    // No receipt needed: "no session" (nobody watches) and a lost broker are both fine.
    this.client.send(groupAddress(liveGroup(p.batch.runId)), p.batch).catch(() => {});
  }

  private lookForBroker(): void {
    const now = Date.now();
    if (now - this.lastCheck < SOCKET_CHECK_MS) return;
    this.lastCheck = now;
    try {
      const ino = statSync(this.socket, { throwIfNoEntry: false })?.ino;
      if (ino === undefined) return;
      if (ino !== this.socketSeen || this.client.state === "backoff") {
        this.socketSeen = ino;
        this.client.nudge();
      }
    } catch {
      // the home is going away; nothing to publish to
    }
  }

  /** Sends what is pending and closes the connection. */
  close(): void {
    if (this.closed) return;
    for (const key of [...this.pending.keys()]) this.flush(key);
    this.closed = true;
    this.client.close();
  }
}

/**
 * Registers in the live groups of some runs and hands every batch sent to them to `onBatch`; `relayed`: it came
 * from a worker host over the journal (its events' `at` is another machine's clock).
 */
export class LiveSubscriber {
  private readonly client: IntercomClient;
  private readonly name = `live-watch:${process.pid}:${Math.random().toString(36).slice(2, 10)}`;
  private runs: string[] = [];
  private readonly remote: RemoteLiveWatcher | undefined;
  /** When marks of each run were last asked for. */
  private readonly marked = new Map<string, number>();

  /** `remote`: a shared journal's live channel, for the runs' stages on worker hosts (live-remote.ts). */
  constructor(home: string, onBatch: (batch: LiveBatch, relayed: boolean) => void, opts: { role?: string; onState?: (open: boolean) => void; remote?: LiveChannelOpener } = {}) {
    this.remote = opts.remote ? new RemoteLiveWatcher(opts.remote, home, (b) => onBatch(b, true)) : undefined;
    this.client = new IntercomClient({
      home,
      role: opts.role ?? "watch",
      spawn: true,
      reconnect: true,
      onMessage: (msg) => {
        const batch = asLiveBatch(msg.body);
        if (batch) onBatch(batch, false);
      },
      onState: (c) => opts.onState?.(c.to === "open"),
    });
  }

  /**
   * Starts (or changes) what it watches: at most 32 runs (the broker's groups per session). Resolves once
   * the broker has the subscription, or after `waitMs` when no broker can be reached (it goes on trying).
   */
  async watch(runIds: string[], waitMs = 3_000): Promise<void> {
    this.runs = [...new Set(runIds)].slice(0, 32);
    const registered = this.client.register(this.name, this.runs.map(liveGroup), "watch").catch(() => {});
    if (this.client.state === "idle") this.client.start();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs)));
    const remote = this.remote?.watch(this.runs);
    await Promise.race([Promise.all([registered, this.client.whenOpen(), remote]).catch(() => {}), late]);
    clearTimeout(timer);
  }

  get watching(): readonly string[] {
    return this.runs;
  }

  /**
   * Asks the publishers of these runs for a mark in each stage attempt's stream (docs/design/live-events.md,
   * "Marks"): this machine's over its broker, a worker host's through its relay (which marks on every ask).
   * Nothing comes back but the marks, in the streams: a publisher not connected now misses the ask, so a
   * watcher that waits for a mark asks again.
   */
  mark(runIds: readonly string[]): void {
    // At most one ask a run per MARK_ASK_GAP_MS, however many stages of it wait (each ask marks every stage of the run).
    const now = Date.now();
    const due = runIds.filter((r) => now - (this.marked.get(r) ?? 0) >= MARK_ASK_GAP_MS);
    if (due.length === 0) return;
    for (const r of due) this.marked.set(r, now);
    if (this.client.isOpen) for (const r of due) this.client.send(groupAddress(liveMarkGroup(r)), { liveMark: 1, runId: r }).catch(() => {}); // no publisher of it: nothing to mark
    this.remote?.askAgain();
  }

  close(): void {
    this.remote?.close();
    this.client.close();
  }
}
