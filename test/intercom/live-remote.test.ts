/**
 * Relayed live bodies (src/intercom/live-remote.ts): a batch too big for one
 * notification is cut into bodies that each fit the channel and together
 * give back the same text in order; a long tool output is cut; a body from
 * the watcher's own home, or that is not a batch, is dropped.
 */

import { expect, test } from "bun:test";
import { liveHomeKey, relayedBatch, splitBatch } from "../../src/intercom/live-remote.ts";
import { LIVE_BODY_MAX } from "../../src/shared/live-channel.ts";

test("a big batch becomes bodies that fit, in order; own-home bodies and junk are dropped", () => {
  const text = "é😀ab\"\\\n".repeat(4_000);
  const batch = {
    live: 1 as const,
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
  const bodies = splitBatch(batch, "elsewhere");
  expect(bodies.length).toBeGreaterThan(5);
  for (const b of bodies) expect(Buffer.byteLength(b)).toBeLessThanOrEqual(LIVE_BODY_MAX);
  const back = bodies.map((b) => relayedBatch(b, "here")!);
  expect(back.every((b) => b.runId === "r1" && b.stage === "0" && b.attempt === 2)).toBe(true);
  const events = back.flatMap((b) => b.events);
  expect(events.filter((e) => e.type === "text_delta").map((e) => e.text).join("")).toBe(text);
  expect(events[0]!.type).toBe("started");
  expect(events.at(-1)).toEqual({ type: "usage", input: 3, output: 4, at: 4 });
  const tool = events.find((e) => e.type === "tool_end")!;
  expect(String(tool.output).length).toBeLessThan(2_100);
  expect(String(tool.output)).toContain("the stage's files keep it whole");

  expect(relayedBatch(bodies[0]!, "elsewhere")).toBeUndefined();
  expect(relayedBatch("not json", "here")).toBeUndefined();
  expect(relayedBatch(JSON.stringify({ f: "x", b: { live: 2 } }), "here")).toBeUndefined();
  expect(liveHomeKey("/tmp/a")).not.toBe(liveHomeKey("/tmp/b"));
});
