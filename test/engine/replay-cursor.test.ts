/**
 * The replay cursor on its own: what it finds at each position, however
 * the position is stored (top-level positions in an array, the others and
 * far-off ones in a map), and which divergence it reports.
 */

import { describe, expect, test } from "bun:test";
import { EVENT, type StepIdentity } from "../../src/engine/journal-events.ts";
import { ReplayCursor } from "../../src/engine/replay-cursor.ts";
import { argsHash, digestArgs } from "../../src/engine/values.ts";
import type { JournalEvent } from "../../src/journal/runs.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { NondeterminismError } from "../../src/shared/errors.ts";

const RUN = "run-1" as RunId;
let seq = 0;

function checkpoint(key: string, name: string, args: unknown = null): JournalEvent {
  return { runId: RUN, seq: ++seq, type: EVENT.checkpoint, key, idempotencyKey: null, payload: { kind: "tool", name, args: digestArgs(args), result: { value: name } }, at: 0 };
}

function started(key: string, name: string): JournalEvent {
  return { runId: RUN, seq: ++seq, type: EVENT.stepStarted, key, idempotencyKey: null, payload: { kind: "stage", name, args: digestArgs({}), attempt: 1 }, at: 0 };
}

const tool = (name: string, args: unknown = null) => ({ kind: "tool" as const, name, args: argsHash(args) });
const stage = (name: string): StepIdentity => ({ kind: "stage", name, args: digestArgs({}) });

function divergence(fn: () => unknown): NondeterminismError {
  try {
    fn();
  } catch (err) {
    if (err instanceof NondeterminismError) return err;
    throw err;
  }
  throw new Error("no divergence");
}

describe("ReplayCursor", () => {
  test("finds recorded steps at top-level, nested and far-off positions", () => {
    const far = "999999999";
    const cursor = new ReplayCursor(RUN, [checkpoint("0", "a"), checkpoint("1.0.0", "b"), checkpoint("2", "c"), started("3", "s"), checkpoint(far, "z")]);
    expect(cursor.replaying).toBe(true);
    expect(cursor.claim("0", tool("a"))?.checkpoint?.name).toBe("a");
    cursor.claimGroup("1", "parallel");
    expect(cursor.claim("1.0.0", tool("b"))?.checkpoint?.name).toBe("b");
    expect(cursor.claim("2", tool("c"))?.checkpoint?.name).toBe("c");
    const s = cursor.claim("3", stage("s"));
    expect(s?.checkpoint).toBeUndefined();
    expect(s?.started?.name).toBe("s");
    expect(s?.attempts).toBe(1);
    expect(cursor.claim("4", tool("new"))).toBeUndefined();
    expect(cursor.claim(far, tool("z"))?.checkpoint?.name).toBe("z");
    expect(cursor.replaying).toBe(false);
    cursor.assertFullyReplayed();
  });

  test("a position is claimed once, recorded or not", () => {
    const cursor = new ReplayCursor(RUN, [checkpoint("0", "a")]);
    cursor.claim("0", tool("a"));
    expect(() => cursor.claim("0", tool("a"))).toThrow("claimed twice");
    expect(cursor.claim("7", tool("x"))).toBeUndefined();
    expect(() => cursor.claim("7", tool("x"))).toThrow("claimed twice");
    expect(cursor.claim("0.1", tool("y"))).toBeUndefined();
    expect(() => cursor.claimGroup("0.1", "chain")).toThrow("claimed twice");
  });

  test("other arguments at a recorded position diverge, naming both digests", () => {
    const cursor = new ReplayCursor(RUN, [checkpoint("0", "a", { n: 1 })]);
    const err = divergence(() => cursor.claim("0", tool("a", { n: 2 })));
    expect(err.position).toBe("0");
    expect(err.expected).toBe(`tool "a" with arguments digest ${digestArgs({ n: 2 })}`);
    expect(err.recorded).toBe(`tool "a" with arguments digest ${digestArgs({ n: 1 })}`);
    // Sticky: every later claim raises it again.
    expect(() => cursor.claim("1", tool("b"))).toThrow(err);
  });

  test("a journal of the base-36 digest form replays, and shows digests in that form", () => {
    const legacy = (e: JournalEvent) => {
      const p = e.payload as { args: string };
      p.args = argsHash(null).toString(36);
      return e;
    };
    const cursor = new ReplayCursor(RUN, [legacy(checkpoint("0", "a")), legacy(checkpoint("1", "b"))]);
    expect(cursor.claim("0", tool("a"))?.checkpoint?.name).toBe("a");
    const err = divergence(() => cursor.claim("1", tool("b", 5)));
    expect(err.expected).toBe(`tool "b" with arguments digest ${argsHash(5).toString(36)}`);
  });

  test("a step where a group stood, or a group where a step stood, diverges", () => {
    const group = new ReplayCursor(RUN, [checkpoint("0.0.0", "a")]);
    expect(divergence(() => group.claim("0", tool("a"))).recorded).toContain("a group of steps");
    const step = new ReplayCursor(RUN, [checkpoint("0", "a")]);
    expect(divergence(() => step.claimGroup("0", "parallel")).expected).toBe("a ctx.parallel group");
  });

  test("returning early reports the first unvisited checkpoint in journal order", () => {
    const cursor = new ReplayCursor(RUN, [checkpoint("0", "a"), checkpoint("1.0.0", "b"), checkpoint("2", "c")]);
    cursor.claim("0", tool("a"));
    const err = divergence(() => cursor.assertFullyReplayed());
    expect(err.position).toBe("1.0.0");
    expect(err.expected).toBe("no step (the workflow returned)");
  });
});
