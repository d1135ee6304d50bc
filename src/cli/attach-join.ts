/**
 * Joining a followed stage's conversation so far (its transcript, read
 * when attaching) and its live events with no gap and no repeat
 * (docs/design/live-events.md, "Marks"). The transcript file is written
 * in buffered steps and, for a stage on a worker host, reaches the
 * artifact store in shipping passes, so the read is behind the live
 * stream by an unknown amount. A mark settles it: a publisher, asked,
 * writes the attempt's transcript to disk and puts a mark with the file's
 * size in the attempt's stream; every event before the mark is within
 * those bytes and none after it. So the view is: the transcript read (its
 * first `read` bytes), the transcript from there up to the mark's bytes,
 * then the live events after the mark.
 *
 * States, for the attempt whose transcript was read:
 *   reading ──read(bytes)──▶ asking
 *   asking ──a mark of at least `bytes` in the held events──▶ catching_up
 *   catching_up ──the transcript up to the mark read──▶ done (events after the mark delivered)
 *   asking ──no such mark within JOIN_WAIT_MS, or a mark without bytes──▶ done, by time
 *   catching_up ──the store does not reach the mark within JOIN_READ_MS──▶ done, by time
 *   any ──close()──▶ done
 * Whether by a mark or by time, the join says where the transcript part
 * ends and the live part begins (`live`), before any event it delivers
 * live: the view shows "── live ──" there, so a person (and a test) can
 * tell a tool call read from the transcript from one that came live;
 * close() says nothing.
 * "By time" is the rule from before marks, which may show an event twice
 * or miss one in flight: held events the read may not have had are kept,
 * judged by their publisher's clock when this machine's broker brought them
 * and by their arrival here when a worker host relayed them (its clock may
 * differ from this one by any amount). It is taken for a stage that
 * writes no transcript (a shell stage's marks carry no bytes) and for one
 * whose publisher never answers (it has said nothing since the asks began,
 * so there is nothing in flight to lose).
 *
 * A mark of fewer bytes than were read was taken before the read: the
 * next one is waited for. While asking, the marks are asked for again
 * every ASK_EVERY_MS: a publisher that was not connected to its broker
 * when asked (it connects on its next event) does not hear the ask.
 * Events of another attempt (a next attempt, after a worker was lost) are
 * delivered as they come: they were never in the transcript read.
 */

import { MARK_EVENT, type LiveBatch } from "../intercom/live.ts";

/** What a runner writes into the transcript of the events it sends (the rest, usage, it does not). */
const IN_TRANSCRIPT = new Set(["text_delta", "tool_start", "tool_end", "message_received", MARK_EVENT]);

/** How long marks are asked for before the join falls back to time. */
export const JOIN_WAIT_MS = 3_000;
/** How often a mark is asked for again while none came. */
const ASK_EVERY_MS = 100;
/** How long the transcript up to a mark may take to be readable (a worker host ships it when it relays the mark). */
export const JOIN_READ_MS = 5_000;
/** How often that read is tried meanwhile. */
export const JOIN_READ_POLL_MS = 25;

export interface JoinIo {
  /** Hands a batch to the view: its events at or after `after` (this machine's clock; 0: all), marks left out. */
  deliver(batch: LiveBatch, after: number): void;
  /** Asks the stage's publishers for a mark. */
  ask(): void;
  /** The transcript from byte `from` to byte `to`, or undefined when it cannot be read in time. */
  rest(from: number, to: number): Promise<string | undefined>;
  /** Shows the transcript after the first read, up to the mark. */
  more(text: string): void;
  /** The transcript part is over: every event delivered from here on comes live. */
  live(): void;
  /** The join is over: batches go to `deliver` directly from now on. */
  done(): void;
}

type State = "reading" | "asking" | "catching_up" | "done";

export class TranscriptJoin {
  private state: State = "reading";
  private held: { b: LiveBatch; arrived?: number }[] = [];
  /** Held batches already looked through for a mark. */
  private looked = 0;
  private readBytes = 0;
  private readAt = 0;
  private until = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    readonly attempt: number,
    private readonly io: JoinIo,
  ) {}

  /** A live batch of the stage; `relayed`: a worker host's, through the journal. */
  batch(b: LiveBatch, relayed: boolean): void {
    if (this.state === "done" || b.attempt !== this.attempt) return this.io.deliver(b, 0);
    this.held.push(relayed ? { b, arrived: Date.now() } : { b });
    if (this.state === "asking") this.look();
  }

  /** The transcript was read, `bytes` of it, at `readAt`: marks are asked for. */
  read(bytes: number, readAt: number): void {
    if (this.state !== "reading") return;
    this.readBytes = bytes;
    this.readAt = readAt;
    this.state = "asking";
    this.until = Date.now() + JOIN_WAIT_MS;
    if (!this.look()) this.ask();
  }

  close(): void {
    this.finish();
  }

  private ask(): void {
    if (this.state !== "asking") return;
    if (Date.now() >= this.until) return this.byTime();
    this.io.ask();
    this.timer = setTimeout(() => this.ask(), ASK_EVERY_MS);
    this.timer.unref?.();
  }

  /** Looks through the held batches not looked through yet for a mark or a start that closes the join; true when found. */
  private look(): boolean {
    for (; this.looked < this.held.length; this.looked++) {
      const events = this.held[this.looked]!.b.events;
      for (let j = 0; j < events.length; j++) {
        const e = events[j]!;
        if (e.type === "started") {
          // The attempt started again (its worker was lost): a new stream, none of it in the transcript read.
          this.byTime(this.looked, j);
          return true;
        }
        if (e.type !== MARK_EVENT) continue;
        if (typeof e.bytes !== "number") {
          this.byTime();
          return true;
        }
        if (e.bytes < this.readBytes) continue; // taken before the read got that far
        void this.catchUp(this.looked, j, e.bytes);
        return true;
      }
    }
    return false;
  }

  private async catchUp(batch: number, event: number, bytes: number): Promise<void> {
    this.state = "catching_up";
    clearTimeout(this.timer);
    const rest = bytes > this.readBytes ? await this.io.rest(this.readBytes, bytes) : "";
    if (this.state !== "catching_up") return; // closed meanwhile
    if (rest === undefined) return this.byTime();
    if (rest) this.io.more(rest);
    this.io.live();
    // What the transcript does not hold (usage) of the events before the mark, by time; then the events after it.
    const before = this.split(batch, event + 1, (b) => ({ ...b, events: b.events.filter((e) => !IN_TRANSCRIPT.has(e.type)) }));
    this.deliverByTime(before);
    this.deliverAll(this.held);
    this.finish();
  }

  /** Every held event by time; with `batch` and `event`: those before it by time, it and the rest as they are. */
  private byTime(batch = this.held.length, event = 0): void {
    this.io.live();
    this.deliverByTime(this.split(batch, event));
    this.deliverAll(this.held);
    this.finish();
  }

  /** Takes the held events before event `event` of held batch `batch` out of `held` (each batch through `keep`). */
  private split(batch: number, event: number, keep = (b: LiveBatch) => b): { b: LiveBatch; arrived?: number }[] {
    const before = this.held.slice(0, batch);
    const at = this.held[batch];
    this.held = this.held.slice(batch);
    if (at) {
      before.push({ ...at, b: { ...at.b, events: at.b.events.slice(0, event) } });
      this.held[0] = { ...at, b: { ...at.b, events: at.b.events.slice(event) } };
    }
    return before.map((h) => ({ ...h, b: keep(h.b) }));
  }

  private deliverByTime(held: readonly { b: LiveBatch; arrived?: number }[]): void {
    for (const { b, arrived } of held) {
      if (arrived === undefined) this.io.deliver(b, this.readAt);
      else if (arrived >= this.readAt) this.io.deliver(b, 0);
    }
  }

  private deliverAll(held: readonly { b: LiveBatch }[]): void {
    for (const { b } of held) this.io.deliver(b, 0);
  }

  private finish(): void {
    if (this.state === "done") return;
    this.state = "done";
    clearTimeout(this.timer);
    this.held = [];
    this.io.done();
  }
}
