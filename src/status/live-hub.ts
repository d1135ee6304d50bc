/**
 * The status server's one subscription to live stage events (intercom/live.ts):
 * a single broker session whose groups are the runs some stream watches now,
 * counted per run, handing each batch to that run's listeners (and, over a
 * shared journal, the batches worker hosts relay for those runs). Without a
 * home (a server over a journal alone, as in tests of the app) there are no
 * live events and streams carry the journal only.
 */

import { LiveSubscriber, MARK_EVENT, type LiveBatch } from "../intercom/live.ts";
import type { LiveChannelOpener } from "../shared/live-channel.ts";

export type LiveListener = (batch: LiveBatch) => void;

export class LiveHub {
  private subscriber: LiveSubscriber | undefined;
  private readonly listeners = new Map<string, Set<LiveListener>>();
  private closed = false;

  /** `remote`: a shared journal's live channel, for stages on worker hosts (intercom/live-remote.ts). */
  constructor(
    private readonly home: string | undefined,
    private readonly remote?: LiveChannelOpener,
  ) {}

  /** Listens to the live events of `runId` until the returned function is called; resolves once the broker has the subscription (or none can be had). */
  async listen(runId: string, listener: LiveListener): Promise<() => void> {
    if (!this.home || this.closed) return () => {};
    let set = this.listeners.get(runId);
    const added = !set;
    if (!set) this.listeners.set(runId, (set = new Set()));
    set.add(listener);
    this.subscriber ??= new LiveSubscriber(this.home, (b) => this.dispatch(b), { role: "status", remote: this.remote });
    if (added) await this.subscriber.watch([...this.listeners.keys()]);
    return () => {
      const s = this.listeners.get(runId);
      if (!s?.delete(listener) || s.size > 0) return;
      this.listeners.delete(runId);
      if (!this.closed) void this.subscriber?.watch([...this.listeners.keys()]);
    };
  }

  private dispatch(batch: LiveBatch): void {
    // Marks (attach's, intercom/live.ts) are not the stage's events: streams leave them out.
    const b = batch.events.some((e) => e.type === MARK_EVENT) ? { ...batch, events: batch.events.filter((e) => e.type !== MARK_EVENT) } : batch;
    if (b.events.length === 0) return;
    for (const l of this.listeners.get(b.runId) ?? []) l(b);
  }

  close(): void {
    this.closed = true;
    this.subscriber?.close();
    this.listeners.clear();
  }
}
