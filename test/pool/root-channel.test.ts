/**
 * When the coordinator tells its root of results (src/pool/root-channel.ts):
 * at the end of the turn, unless the pool has more of the root's work
 * queued; then a result waits for the next message to the root, or for the
 * coalescing window, and never goes twice. The channel is the real one; the
 * IPC channel is this test process's `process.send`, recorded.
 */

import { afterEach, beforeEach, expect, test } from "bun:test";
import type { CoordinatorCore } from "../../src/pool/coordinator-core.ts";
import type { FromCoordinator } from "../../src/pool/protocol/root-coordinator.ts";
import { RootChannel } from "../../src/pool/root-channel.ts";
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

function channel(): RootChannel {
  return new RootChannel({} as CoordinatorCore, { attach() {}, control() {}, shutdown() {} });
}

const result = (text: string) => ({ status: "completed", text, workerId: "w1", generation: 1 }) as unknown as StageResult;
const turn = () => new Promise((r) => setImmediate(r));
const doneIds = () => sent.map((m) => (m.type === "work_done" ? m.items.map((i) => i.workId) : m.type));

test("results of one turn go together at its end, once each", async () => {
  const root = channel();
  root.done("a", result("a"));
  root.done("b", result("b"));
  root.done("a", result("again"));
  expect(sent).toEqual([]);
  await turn();
  expect(doneIds()).toEqual([["a", "b"]]);
  await turn();
  expect(sent).toHaveLength(1);
});

test("with more work queued a result waits for the next message to the root, and goes before it", async () => {
  const root = channel();
  root.done("a", result("a"), { moreQueued: true });
  await turn();
  await turn();
  expect(sent).toEqual([]);
  root.send({ type: "control_ack", rev: 1 });
  expect(doneIds()).toEqual([["a"], "control_ack"]);
});

test("a waiting result goes with the next one that may not wait", async () => {
  const root = channel();
  root.done("a", result("a"), { moreQueued: true });
  await turn();
  root.done("b", result("b"));
  await turn();
  expect(doneIds()).toEqual([["a", "b"]]);
});

test("a waiting result goes by itself once the coalescing window has passed, and flush() sends at once", async () => {
  const root = channel();
  root.done("a", result("a"), { moreQueued: true });
  const deadline = Date.now() + 5_000;
  while (sent.length === 0 && Date.now() < deadline) await Bun.sleep(2);
  expect(doneIds()).toEqual([["a"]]);
  root.done("b", result("b"), { moreQueued: true });
  root.flush();
  expect(doneIds()).toEqual([["a"], ["b"]]);
  await Bun.sleep(30);
  expect(sent).toHaveLength(2);
});
