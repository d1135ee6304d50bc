/**
 * The live-output cap of the pool (src/pool/event-batcher.ts): a batch
 * carries at most the cap of text per stage, what it leaves out is counted
 * per stream, counts from earlier hops add up, and the root's intake turns
 * them into one line per stream. Events without text always pass.
 */

import { expect, test } from "bun:test";
import { EventBatcher, capEvents } from "../../src/pool/event-batcher.ts";
import type { RunnerEvent } from "../../src/runners/types.ts";

const out = (text: string, stream: "stdout" | "stderr" = "stdout"): RunnerEvent => ({ type: "output", stream, text });

function batchOf(events: RunnerEvent[], cap: number): RunnerEvent[] {
  let sent: RunnerEvent[] = [];
  const b = new EventBatcher(60_000, (batch) => (sent = batch), cap);
  for (const e of events) b.push(e);
  b.flush();
  return sent;
}

test("a batch keeps the first `cap` characters, merged, and counts the rest per stream as data", () => {
  const batch = batchOf([out("aaaa"), out("bbbb"), out("ccc", "stderr"), { type: "usage", usage: { turns: 1 } }, out("dddd")], 6);
  expect(batch).toEqual([
    { type: "output", stream: "stdout", text: "aaaabb" },
    { type: "usage", usage: { turns: 1 } },
    { type: "output", stream: "stdout", text: "", skipped: 6 },
    { type: "output", stream: "stderr", text: "", skipped: 3 },
  ]);
});

test("skipped counts of an earlier hop add to this hop's, and the root renders one line per stream", () => {
  const worker = batchOf([out("x".repeat(10)), out("y".repeat(3000))], 10);
  const coordinator = batchOf([...worker, out("z".repeat(5))], 8);
  expect(coordinator).toEqual([
    { type: "output", stream: "stdout", text: "xxxxxxxx" },
    { type: "output", stream: "stdout", text: "", skipped: 3000 + 2 + 5 },
  ]);
  const root = capEvents(coordinator, 4);
  expect(root).toEqual([
    { type: "output", stream: "stdout", text: "xxxx" },
    { type: "output", stream: "stdout", text: "\n… 2.9 KiB skipped, see atomic logs\n" },
  ]);
});

test("the budget counts bytes skipped, not characters, and under the cap nothing changes", () => {
  expect(capEvents([out("é".repeat(4))], 2)).toEqual([out("éé"), out("\n… 4 bytes skipped, see atomic logs\n")]);
  const events = [out("short"), { type: "text_delta", text: "hi" } as RunnerEvent, { type: "tool_start", name: "read" } as RunnerEvent];
  expect(capEvents(events)).toEqual(events);
  expect(batchOf(events, 100)).toEqual(events);
});

test("the caller's events are not changed by merging", () => {
  const first = out("a");
  batchOf([first, out("b")], 100);
  expect(first).toEqual(out("a"));
});

test("take() hands the pending batch to the caller instead of sending it, and the batcher starts afresh", () => {
  const sent: RunnerEvent[][] = [];
  const b = new EventBatcher(60_000, (batch) => sent.push(batch), 4);
  b.push({ type: "started", at: 1 });
  b.push(out("abcdef"));
  expect(b.take()).toEqual([{ type: "started", at: 1 }, { type: "output", stream: "stdout", text: "abcd" }, { type: "output", stream: "stdout", text: "", skipped: 2 }]);
  expect(b.take()).toEqual([]);
  b.push(out("xy"));
  b.flush();
  expect(sent).toEqual([[{ type: "output", stream: "stdout", text: "xy" }]]); // nothing taken was sent; the budget is whole again
});
