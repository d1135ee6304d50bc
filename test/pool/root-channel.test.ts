/**
 * When the coordinator tells its root of results (src/pool/root-channel.ts):
 * at once, in the order settled, and never twice; and of live events: each
 * worker's batch at once, the last ones on the result. The channel is the real
 * one; the IPC channel is this test process's `process.send`, recorded.
 */

import { afterEach, beforeEach, expect, test } from "bun:test";
import type { CoordinatorCore } from "../../src/pool/coordinator-core.ts";
import type { FromCoordinator } from "../../src/pool/protocol/root-coordinator.ts";
import { ANSWERED_KEEP_MS, RootChannel } from "../../src/pool/root-channel.ts";
import type { StageResult } from "../../src/sdk/types.ts";

let sent: FromCoordinator[] = [];
const saved = { send: process.send, connected: Object.getOwnPropertyDescriptor(process, "connected") };

beforeEach(() => {
  sent = [];
  process.send = ((msg: FromCoordinator) => (sent.push(msg), true)) as typeof process.send;
  Object.defineProperty(process, "connected", { value: true, configurable: true });
});

afterEach(() => {
  process.send = saved.send;
  if (saved.connected) Object.defineProperty(process, "connected", saved.connected);
  else delete (process as { connected?: boolean }).connected;
});

function channel(now?: () => number): RootChannel {
  return new RootChannel({} as CoordinatorCore, { attach() {}, control() {}, shutdown() {}, stopWaiting() {} }, now);
}

const result = (text: string) => ({ status: "completed", text, workerId: "w1", generation: 1 }) as unknown as StageResult;
const doneIds = () => sent.map((m) => (m.type === "work_done" ? m.items.map((i) => i.workId) : m.type));

test("each result goes at once, in the order settled, once each", () => {
  const root = channel();
  root.done("a", result("a"));
  root.done("b", result("b"));
  root.done("a", result("again"));
  expect(doneIds()).toEqual([["a"], ["b"]]);
});

test("a result keeps its place among the other messages to the root", () => {
  const root = channel();
  root.done("a", result("a"));
  root.send({ type: "control_ack", rev: 1 });
  root.done("b", result("b"));
  expect(doneIds()).toEqual([["a"], "control_ack", ["b"]]);
});

test("answered items are remembered for a while, not for the coordinator's whole life", () => {
  let now = 0;
  const root = channel(() => now);
  for (let i = 0; i < 100; i++) root.done(`a${i}`, result("a"));
  now += ANSWERED_KEEP_MS; // a new generation starts with the next result; the first is still remembered
  root.done("b", result("b"));
  root.done("a7", result("late duplicate"));
  expect(root.remembered()).toBe(101);
  now += ANSWERED_KEEP_MS; // the first generation goes
  root.done("c", result("c"));
  root.done("b", result("late duplicate"));
  expect(root.remembered()).toBe(2);
  expect(doneIds()).toEqual([...Array.from({ length: 100 }, (_, i) => [`a${i}`]), ["b"], ["c"]]);
});

test("a worker's batch of live events goes on at once; those that came with a result ride on its work_done", () => {
  const root = channel();
  root.events("a", [{ type: "started", at: 1 }]);
  root.events("a", [{ type: "tool_start", name: "list" }, { type: "tool_end", name: "list", ok: true }]);
  root.events("a", [{ type: "usage", usage: { outputTokens: 3 } }], { hold: true });
  root.events("b", []);
  expect(sent).toEqual([
    { type: "work_events", batch: [{ workId: "a", events: [{ type: "started", at: 1 }] }] },
    { type: "work_events", batch: [{ workId: "a", events: [{ type: "tool_start", name: "list" }, { type: "tool_end", name: "list", ok: true }] }] },
  ]);
  root.done("a", result("a"));
  root.done("b", result("b"));
  expect(sent.slice(2)).toEqual([
    { type: "work_done", items: [{ workId: "a", result: result("a"), events: [{ type: "usage", usage: { outputTokens: 3 } }] }] },
    { type: "work_done", items: [{ workId: "b", result: result("b") }] },
  ]);
});
