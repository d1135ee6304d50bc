/**
 * Coalesces a stream of live events into batches sent at most every
 * `intervalMs`, so a chatty stage cannot flood its coordinator or the root.
 * Consecutive output chunks of the same stream are merged into one event.
 */

import type { RunnerEvent } from "../runners/types.ts";

export class EventBatcher<E> {
  private pending: E[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly intervalMs: number,
    private readonly send: (batch: E[]) => void,
  ) {}

  push(event: E): void {
    const last = this.pending[this.pending.length - 1];
    if (!mergeInto(last, event)) this.pending.push(event);
    this.timer ??= setTimeout(() => this.flush(), this.intervalMs);
  }

  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    this.send(batch);
  }
}

function mergeInto(last: unknown, event: unknown): boolean {
  const a = last as RunnerEvent | undefined;
  const b = event as RunnerEvent;
  if (a?.type === "output" && b.type === "output" && a.stream === b.stream) {
    a.text += b.text;
    return true;
  }
  if (a?.type === "text_delta" && b.type === "text_delta") {
    a.text += b.text;
    return true;
  }
  return false;
}
