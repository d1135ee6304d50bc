/**
 * Relayed live bodies (src/intercom/live-remote.ts): a batch too big for one
 * notification is cut into bodies that each fit the channel and together
 * give back the same text in order; a long tool output is cut; the small
 * batches of many stage attempts share one body; a body from the watcher's
 * own home, or that is not a batch, is dropped; a body of one batch (as a
 * host of an earlier version relays it) is read.
 */

import { expect, test } from "bun:test";
import { liveHomeKey, packBatches, relayedBatches } from "../../src/intercom/live-remote.ts";
import type { LiveBatch } from "../../src/intercom/live-batch.ts";
import { LIVE_BODY_MAX } from "../../src/shared/live-channel.ts";

test("a big batch becomes bodies that fit, in order; own-home bodies and junk are dropped", () => {
  const text = "é😀ab\"\\\n".repeat(4_000);
  const batch: LiveBatch = {
    live: 1,
    runId: "r1",
    stage: "0",
    attempt: 2,
    events: [
      { type: "started", at: 1 },
      { type: "text_delta", text, at: 2 },
      { type: "tool_end", output: "x".repeat(50_000), at: 3 },
      { type: "usage", input: 3, output: 4, at: 4 },
    ],
  };
  const bodies = packBatches([batch], "elsewhere");
  expect(bodies.length).toBeGreaterThan(5);
  for (const b of bodies) expect(Buffer.byteLength(b)).toBeLessThanOrEqual(LIVE_BODY_MAX);
  const back = bodies.flatMap((b) => relayedBatches(b, "here"));
  expect(back.length).toBe(bodies.length);
  expect(back.every((b) => b.runId === "r1" && b.stage === "0" && b.attempt === 2)).toBe(true);
  const events = back.flatMap((b) => b.events);
  expect(events.filter((e) => e.type === "text_delta").map((e) => e.text).join("")).toBe(text);
  expect(events[0]!.type).toBe("started");
  expect(events.at(-1)).toEqual({ type: "usage", input: 3, output: 4, at: 4 });
  const tool = events.find((e) => e.type === "tool_end")!;
  expect(String(tool.output).length).toBeLessThan(2_100);
  expect(String(tool.output)).toContain("the stage's files keep it whole");

  expect(relayedBatches(bodies[0]!, "elsewhere")).toEqual([]);
  expect(relayedBatches("not json", "here")).toEqual([]);
  expect(relayedBatches(JSON.stringify({ f: "x", b: { live: 2 } }), "here")).toEqual([]);
  expect(liveHomeKey("/tmp/a")).not.toBe(liveHomeKey("/tmp/b"));
});

test("the waiting batches of 20 stages share bodies, each stage's events in order; big and small batches mixed still fit", () => {
  const small = Array.from({ length: 20 }, (_, i): LiveBatch => ({ live: 1, runId: "r1", stage: `s${i}`, attempt: 1, events: [{ type: "text_delta", text: `@${1_700_000_000_000 + i} `, at: i }, { type: "usage", input: 1, output: 2, at: i }] }));
  const one = packBatches(small, "elsewhere");
  expect(one.length).toBe(1);
  expect(relayedBatches(one[0]!, "here")).toEqual(small);

  const big: LiveBatch = { live: 1, runId: "r1", stage: "big", attempt: 3, events: [{ type: "text_delta", text: "ü".repeat(20_000), at: 1 }] };
  const mixed = [...small.slice(0, 10), big, ...small.slice(10)];
  const bodies = packBatches(mixed, "elsewhere");
  for (const b of bodies) expect(Buffer.byteLength(b)).toBeLessThanOrEqual(LIVE_BODY_MAX);
  const back = bodies.flatMap((b) => relayedBatches(b, "here"));
  const textOf = (stage: string) => back.filter((b) => b.stage === stage).flatMap((b) => b.events.map((e) => e.text ?? "")).join("");
  expect(textOf("big")).toBe(String(big.events[0]!.text));
  for (const s of small) expect(back.filter((b) => b.stage === s.stage)).toEqual([s]);
  // Stages in the order they were waiting.
  expect([...new Set(back.map((b) => b.stage))]).toEqual(mixed.map((b) => b.stage));
});

test("a body of one batch, as a host of an earlier version relays it, is read", () => {
  const b: LiveBatch = { live: 1, runId: "r1", stage: "0", attempt: 1, events: [{ type: "text_delta", text: "hi", at: 1 }] };
  expect(relayedBatches(JSON.stringify({ f: "x", b }), "here")).toEqual([b]);
});
