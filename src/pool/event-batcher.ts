/**
 * Live stage events on their way worker → coordinator → root: coalesced
 * into batches sent at most every `intervalMs`, and capped, so a chatty
 * stage can flood neither its coordinator nor the root. The worker batches;
 * a run's coordinator passes each batch on as it comes (root-channel.ts), a
 * worker host's batches them again for the journal (fleet/host-link.ts).
 *
 * - Coalescing: consecutive output chunks of the same stream (and
 *   consecutive text deltas) are merged into one event.
 * - Cap (TextBudget): a batch carries at most LIVE_TEXT_CAP characters of
 *   text per stage (output and text deltas together); what does not fit is
 *   counted, not kept. The worker (and a worker host) pass the count on as
 *   data (an event with empty text and `skipped` bytes, one per stream and
 *   batch, adding up what earlier hops skipped); the root caps what it
 *   takes in once more and turns the counts into one line per stream for
 *   the live view: "… 12.3 MiB skipped, see atomic logs". So memory and IPC
 *   per stage stay bounded at every hop, about 256 Ki characters a second.
 *   Only the live view is thinned: the stage's log files, written by the
 *   runner where the stage runs, keep everything, and so does its result.
 * Events without text (tool calls, usage) always pass.
 */

import { formatBytes } from "../shared/format-bytes.ts";
import type { RunnerEvent } from "../runners/types.ts";

/** Characters of live text per stage per batch (64 KiB of ASCII). */
export const LIVE_TEXT_CAP = 64 * 1024;

type TextEvent = Extract<RunnerEvent, { type: "output" | "text_delta" }>;
type Channel = "stdout" | "stderr" | "text";

/** Admits a batch's events until its text budget is spent; counts the text it had to leave out. */
export class TextBudget {
  private left: number;
  private readonly skipped = new Map<Channel, number>();

  constructor(cap = LIVE_TEXT_CAP) {
    this.left = cap;
  }

  /** The event as it may go on (its text cut to what is left), or undefined when none of it fits. */
  admit(event: RunnerEvent): RunnerEvent | undefined {
    if (event.type !== "output" && event.type !== "text_delta") return event;
    if (event.skipped) this.count(event, event.skipped); // an earlier hop's count: added to this batch's
    const { text } = event;
    if (!text) return undefined;
    if (text.length <= this.left) {
      this.left -= text.length;
      return event.skipped ? { ...event, skipped: undefined } : event;
    }
    const kept = text.slice(0, this.left);
    this.count(event, Buffer.byteLength(text.slice(kept.length)));
    this.left = 0;
    return kept ? ({ type: event.type, ...(event.type === "output" ? { stream: event.stream } : {}), text: kept } as TextEvent) : undefined;
  }

  /**
   * What was skipped, one event per channel: as data for the next hop, or
   * (`render`) as a line of text for the live view.
   */
  notices(render: boolean): RunnerEvent[] {
    const out: RunnerEvent[] = [];
    for (const [channel, bytes] of this.skipped) {
      const text = render ? `\n… ${formatBytes(bytes)} skipped, see atomic logs\n` : "";
      const skipped = render ? {} : { skipped: bytes };
      out.push(channel === "text" ? { type: "text_delta", text, ...skipped } : { type: "output", stream: channel, text, ...skipped });
    }
    return out;
  }

  private count(event: TextEvent, bytes: number): void {
    const channel: Channel = event.type === "output" ? event.stream : "text";
    this.skipped.set(channel, (this.skipped.get(channel) ?? 0) + bytes);
  }
}

/** The root's intake of one batch: at most `cap` characters of text, then a line per stream saying what was skipped. */
export function capEvents(events: readonly RunnerEvent[], cap = LIVE_TEXT_CAP): RunnerEvent[] {
  const budget = new TextBudget(cap);
  const kept: RunnerEvent[] = [];
  for (const e of events) {
    const admitted = budget.admit(e);
    if (admitted) kept.push(admitted);
  }
  kept.push(...budget.notices(true));
  return kept;
}

export class EventBatcher {
  private pending: RunnerEvent[] = [];
  private budget: TextBudget;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly intervalMs: number,
    private readonly send: (batch: RunnerEvent[]) => void,
    private readonly cap = LIVE_TEXT_CAP,
  ) {
    this.budget = new TextBudget(cap);
  }

  push(event: RunnerEvent): void {
    this.timer ??= setTimeout(() => this.flush(), this.intervalMs);
    const admitted = this.budget.admit(event);
    if (!admitted) return;
    const last = this.pending[this.pending.length - 1];
    // A copy goes into the batch: merging appends to it, never to the caller's event.
    if (!mergeInto(last, admitted)) this.pending.push({ ...admitted });
  }

  flush(): void {
    const batch = this.take();
    if (batch.length > 0) this.send(batch);
  }

  /** The pending batch, handed to the caller instead of sent (it rides on another message); the batcher starts afresh. */
  take(): RunnerEvent[] {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending;
    batch.push(...this.budget.notices(false));
    this.pending = [];
    this.budget = new TextBudget(this.cap);
    return batch;
  }
}

function mergeInto(last: RunnerEvent | undefined, event: RunnerEvent): boolean {
  if (last?.type === "output" && event.type === "output" && last.stream === event.stream) {
    last.text += event.text;
    return true;
  }
  if (last?.type === "text_delta" && event.type === "text_delta") {
    last.text += event.text;
    return true;
  }
  return false;
}
