/**
 * A worker host's relay of live stage events (docs/design/live-events.md,
 * "Worker hosts"): the stages this host runs publish their model deltas,
 * tool calls and output on the broker of the host's home; a watcher on
 * another machine (attach, a status server's streams) asks for the runs it
 * watches over the shared journal's live channel (intercom/live-remote.ts),
 * and this relay forwards those runs' batches there.
 *
 * - Demand only: with no ask heard for WATCH_KEEP_MS the relay holds no
 *   broker subscription and sends nothing; a host nobody watches pays one
 *   idle LISTEN.
 * - Bounded: one notification in flight at a time, at most MAX_PER_SECOND
 *   spread evenly (MIN_GAP_MS apart);
 *   batches of a stage attempt that arrive meanwhile are merged (their text
 *   deltas joined), and a stage attempt's waiting text beyond
 *   MAX_PENDING_CHARS is left out, counted as `skipped` (the stage's
 *   transcript and logs keep it). Each notification carries what waits of
 *   every stage attempt while it fits the channel (packBatches): one per
 *   stage attempt made 20 stages streaming at once wait their turn at 100
 *   a second (p50 239 ms from provider to attach, bench/attach-latency.ts).
 * - Marks: every ask heard makes the runs' publishers put a mark in each
 *   stage attempt's stream (intercom/live.ts, LiveSubscriber.mark) once the
 *   subscription holds; a batch with a mark has its attempt's files shipped
 *   at once (`onMark`), so a watcher reads the transcript up to the mark
 *   without waiting for the shipper's next pass.
 * - Not stored: these are notifications, never journal events; a watcher
 *   that was away reads the text from the stage's files.
 * - A lost connection is opened again after a back-off (asks heard before
 *   it stay until they run out; watchers ask again every WATCH_RENEW_MS).
 */

import { LiveSubscriber, MARK_EVENT, type LiveBatch } from "../intercom/live.ts";
import { WATCH_KEEP_MS, WATCH_RENEW_MS, liveHomeKey, packBatches } from "../intercom/live-remote.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";
import { ensureError } from "../shared/errors.ts";
import type { LiveChannel, LiveChannelOpener } from "../shared/live-channel.ts";

/** Notifications a host sends per second at most. */
export const MAX_PER_SECOND = 100;
/**
 * The least time between two notifications: MAX_PER_SECOND spread evenly. (A count per second let a burst of
 * 100 go out in a quarter second and the rest wait for the next second: 20 stages streaming hit the cap and
 * waited up to 700 ms, the worker host's p99 in bench/attach-latency.ts.)
 */
const MIN_GAP_MS = 1_000 / MAX_PER_SECOND;
/** Text of one stage attempt waiting to be relayed, at most (characters). */
export const MAX_PENDING_CHARS = 64 * 1024;
const REOPEN: Backoff = { firstMs: 250, maxMs: 5_000, jitter: 0.2 };

export class LiveRelay {
  private channel: LiveChannel | undefined;
  private opening = false;
  private failures = 0;
  private retry: ReturnType<typeof setTimeout> | undefined;
  /** Runs asked for, and until when. */
  private readonly asked = new Map<string, number>();
  private subscriber: LiveSubscriber | undefined;
  /** Resolves once the broker has the subscription's current groups. */
  private subscribed: Promise<void> = Promise.resolve();
  private readonly pending = new Map<string, LiveBatch>();
  private pumping = false;
  /** When the last notification went out (the next waits MIN_GAP_MS after it). */
  private lastSent = 0;
  private readonly key: string;
  private readonly sweep: ReturnType<typeof setInterval>;
  private closed = false;

  constructor(
    private readonly home: string,
    private readonly open: LiveChannelOpener,
    private readonly log: (line: string) => void,
    /** A stage attempt put a mark in its stream: its files go to the store now, where the watcher reads up to the mark. */
    private readonly onMark: (runId: string, stage: string, attempt: number) => void = () => {},
  ) {
    this.key = liveHomeKey(home);
    this.sweep = setInterval(() => this.forget(), WATCH_RENEW_MS);
    this.sweep.unref?.();
  }

  start(): void {
    if (this.closed || this.channel || this.opening) return;
    this.opening = true;
    this.open({
      onWatch: (runs) => this.heard(runs),
      onLost: (err) => {
        this.channel = undefined;
        this.log(`live events' channel lost (${err.message}); listening again`);
        this.later();
      },
    }).then(
      (channel) => {
        this.opening = false;
        this.failures = 0;
        if (this.closed) void channel.close();
        else this.channel = channel;
        void this.pump();
      },
      (err: unknown) => {
        this.opening = false;
        if (this.failures === 0) this.log(`live events' channel not opened (${ensureError(err).message}); trying again`);
        this.later();
      },
    );
  }

  private later(): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.start();
    }, backoffDelay(REOPEN, this.failures++));
    this.retry.unref?.();
  }

  private heard(runs: string[]): void {
    const until = Date.now() + WATCH_KEEP_MS;
    let added = false;
    for (const r of runs) {
      if (!this.asked.has(r)) added = true;
      this.asked.set(r, until);
    }
    if (added) this.subscribe();
    // Every ask marks the runs' streams once this relay follows them (docs/design/live-events.md, "Marks").
    const subscriber = this.subscriber;
    void this.subscribed.then(() => {
      if (!this.closed && subscriber === this.subscriber) subscriber?.mark(runs.filter((r) => this.asked.has(r)));
    });
  }

  private forget(): void {
    const now = Date.now();
    let gone = false;
    for (const [r, until] of this.asked) {
      if (until < now) {
        this.asked.delete(r);
        gone = true;
      }
    }
    if (gone) this.subscribe();
  }

  /** The broker subscription follows the asks: the newest 32 runs (a session's groups), none when none is asked for. */
  private subscribe(): void {
    if (this.closed) return;
    const runs = [...this.asked.entries()].sort((a, b) => b[1] - a[1]).map(([r]) => r).slice(0, 32);
    if (runs.length === 0) {
      this.subscriber?.close();
      this.subscriber = undefined;
      return;
    }
    this.subscriber ??= new LiveSubscriber(this.home, (b) => this.take(b), { role: "relay" });
    this.subscribed = this.subscriber.watch(runs);
  }

  private take(b: LiveBatch): void {
    if (!this.asked.has(b.runId) || this.closed) return;
    if (b.events.some((e) => e.type === MARK_EVENT)) this.onMark(b.runId, b.stage, b.attempt);
    const key = `${b.runId}\u0000${b.stage}\u0000${b.attempt}`;
    const p = this.pending.get(key);
    if (!p) this.pending.set(key, { ...b, events: [...b.events] });
    else {
      for (const e of b.events) {
        const last = p.events.at(-1);
        if (last && last.type === "text_delta" && e.type === "text_delta" && typeof last.text === "string" && typeof e.text === "string") last.text += e.text;
        else p.events.push(e);
      }
      bound(p);
    }
    void this.pump();
  }

  /** One notification at a time, each with what waits of every stage attempt (in order of their first waiting batch) while it fits. */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.channel && this.pending.size > 0 && !this.closed) {
        await this.gap(); // what arrives meanwhile goes in the same notification
        const batches = [...this.pending.values()];
        this.pending.clear();
        for (const body of packBatches(batches, this.key)) {
          await this.gap();
          this.lastSent = Date.now();
          const channel = this.channel;
          if (!channel) break;
          await channel.publish(body).catch(() => {}); // a lost connection says so through onLost
        }
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Until MIN_GAP_MS after the last notification. */
  private async gap(): Promise<void> {
    const wait = this.lastSent + MIN_GAP_MS - Date.now();
    if (wait > 0) await Bun.sleep(wait);
  }

  close(): void {
    this.closed = true;
    clearInterval(this.sweep);
    clearTimeout(this.retry);
    this.subscriber?.close();
    void this.channel?.close();
    this.channel = undefined;
    this.pending.clear();
  }
}

/** Leaves out a waiting batch's oldest text beyond MAX_PENDING_CHARS, counted as skipped on the delta that stays. */
function bound(b: LiveBatch): void {
  let chars = 0;
  for (const e of b.events) if (typeof e.text === "string") chars += e.text.length;
  let over = chars - MAX_PENDING_CHARS;
  for (const e of b.events) {
    if (over <= 0) break;
    if (typeof e.text !== "string" || e.text.length === 0) continue;
    const cut = Math.min(over, e.text.length);
    e.text = e.text.slice(cut);
    e.skipped = ((e.skipped as number | undefined) ?? 0) + cut;
    over -= cut;
  }
}
