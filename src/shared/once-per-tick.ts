/**
 * A call that runs at most once per burst: however many times the returned
 * function is called in one turn of the event loop, `fn` runs once, in a
 * microtask after that turn's synchronous code. A call after it ran
 * schedules it again. Used where one message stands for many (the pool's
 * `work_ready`, the fleet's wake-up of its hosts): a fan-out of 500 stages
 * sends a few, not 500.
 */

export function oncePerTick(fn: () => void): () => void {
  let scheduled = false;
  return () => {
    if (scheduled) return;
    scheduled = true;
    queueMicrotask(() => {
      scheduled = false;
      fn();
    });
  };
}
