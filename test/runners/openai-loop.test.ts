/**
 * The openai agent loop's state machine (src/runners/openai/agent-loop.ts):
 * the { from, to } sequence of its transitions for a turn with a tool call
 * interrupted mid-tool, an interrupted model call, a corrective re-prompt,
 * the two wrap-ups (a spending cap: the call in flight finishes, no tool
 * runs, no new call; the time limit: the call in flight is aborted, then
 * the wrap-up turn) and a cancel; and a transition refused outside the
 * state it starts from. Against the fake server, the loop in this process.
 */

import { afterEach, beforeEach, expect, test } from "bun:test";
import { AgentLoop, type LoopTransition } from "../../src/runners/openai/agent-loop.ts";
import { killAllGroups, liveGroupCount } from "../../src/runners/shell/process-groups.ts";
import type { RunnerEvent, StageRequest } from "../../src/runners/types.ts";
import { deferred, waitUntil } from "../engine/helpers.ts";
import { inOrder, text, toolCall } from "../helpers/fake-openai.ts";
import { closeStage, openStage, stageRequest, type OpenAIStage } from "../helpers/openai-stage.ts";

let stage: OpenAIStage;

beforeEach(async () => {
  stage = await openStage();
});

afterEach(async () => {
  killAllGroups("SIGKILL");
  await closeStage(stage);
  expect(liveGroupCount()).toBe(0);
});

function start(req: StageRequest) {
  const transitions: string[] = [];
  const events: RunnerEvent[] = [];
  const loop = new AgentLoop(req, (e) => events.push(e), (t: LoopTransition) => transitions.push(`${t.from}→${t.to}`));
  return { loop, transitions, events, result: loop.run() };
}

test("a tool call interrupted mid-tool, then the final answer: idle → preparing → calling → running_tools → preparing → calling → ended", async () => {
  stage.server.setScript(inOrder(toolCall("bash", { command: "sleep 30" }), text("done")));
  const { loop, transitions, events, result } = start(stageRequest(stage));
  await waitUntil(() => events.some((e) => e.type === "tool_start"), "the tool to start");
  expect(transitions.at(-1)).toBe("calling→running_tools");
  await loop.send("never mind", "interrupt");
  const r = await result;
  expect(r.status).toBe("completed");
  expect(transitions).toEqual(["idle→preparing", "preparing→calling", "calling→running_tools", "running_tools→preparing", "preparing→calling", "calling→ended"]);
  // the interrupt message went into the second call, the unanswered call was dropped
  expect(stage.server.requests[1]!.body.messages.at(-1)).toMatchObject({ role: "user", content: "never mind" });
  expect(stage.server.requests[1]!.body.messages.some((m) => m.role === "tool")).toBe(false);
});

test("an interrupted model call goes back to preparing; a plain answer to a schema task is re-prompted; a cancel ends the loop from calling", async () => {
  const gate = deferred();
  stage.server.setScript((_req, i) => (i === 0 ? { ...text("slow"), hold: gate.promise } : i === 1 ? text("plain text, no tool") : toolCall("structured_output", { ok: true })));
  const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] };
  const first = start(stageRequest(stage, {}, { schema }));
  await waitUntil(() => stage.server.requests.length === 1, "the first call");
  first.loop.interruptTurn();
  const r = await first.result;
  gate.resolve();
  expect(r.status).toBe("completed");
  expect(r.structured).toEqual({ ok: true });
  expect(first.transitions).toEqual([
    "idle→preparing",
    "preparing→calling",
    "calling→preparing", // the interrupt aborted the call
    "preparing→calling",
    "calling→preparing", // plain text where structured output was due: a corrective re-prompt
    "preparing→calling",
    "calling→running_tools",
    "running_tools→ended", // structured_output accepted
  ]);

  stage.server.setScript(inOrder({ ...text("never"), hold: new Promise(() => {}) }));
  const second = start(stageRequest(stage));
  await waitUntil(() => second.transitions.includes("preparing→calling"), "the call to start");
  second.loop.stop("cancelled", "stop");
  expect((await second.result).status).toBe("cancelled");
  expect(second.transitions).toEqual(["idle→preparing", "preparing→calling", "calling→ended"]);
  await expect(second.loop.send("late", "steer")).rejects.toThrow("the stage has ended");
});

test("the time wrap-up aborts the call in flight (not counted, and said so); the wrap-up turn's answer ends the loop", async () => {
  stage.server.setScript((_req, i) => (i === 0 ? { ...toolCall("list", {}), hold: new Promise(() => {}) } : text("wrapped up", { prompt: 7, completion: 3 })));
  const { loop, transitions, result } = start(stageRequest(stage));
  await waitUntil(() => stage.server.requests.length === 1, "the first call");
  loop.wrapUp("Budget used up: answer now.", "time");
  const r = await result;
  expect(r.text).toBe("wrapped up");
  expect(transitions).toEqual(["idle→preparing", "preparing→calling", "calling→preparing", "preparing→calling", "calling→ended"]);
  expect(stage.server.requests[0]!.aborted).toBe(true);
  expect(stage.server.requests[1]!.body.tools).toBeUndefined();
  expect(r.usage).toMatchObject({ inputTokens: 7, outputTokens: 3, turns: 1 });
  expect(r.warnings).toEqual(["1 model call(s) aborted mid-reply (interrupt or time budget) are not counted in the usage: the provider reported none for them"]);
});

test("the spending wrap-up lets the call in flight finish and counts it; its tools do not run and no call follows", async () => {
  const release = deferred<void>();
  stage.server.setScript(() => ({ ...toolCall("list", {}), text: "looking", usage: { prompt: 11, completion: 4, cost: 0.0003 }, hold: release.promise }));
  const { loop, transitions, result, events } = start(stageRequest(stage));
  await waitUntil(() => stage.server.requests.length === 1, "the first call");
  loop.wrapUp("Budget used up: answer now.", "spending");
  release.resolve();
  const r = await result;
  expect(r.status).toBe("completed");
  expect(r.text).toBe("looking");
  expect(transitions).toEqual(["idle→preparing", "preparing→calling", "calling→running_tools", "running_tools→ended"]);
  expect(stage.server.requests).toHaveLength(1);
  expect(stage.server.requests[0]!.aborted).toBe(false);
  expect(events.some((e) => e.type === "tool_start")).toBe(false);
  expect(r.usage).toMatchObject({ inputTokens: 11, outputTokens: 4, costMicroUsd: 300, turns: 1 });
  expect(r.warnings).toBeUndefined();
});

test("a transition outside the state it starts from is refused (a bug, not a state)", async () => {
  const { loop, result } = start(stageRequest(stage));
  expect(() => (loop as unknown as { startTools(): void }).startTools()).toThrow("agent loop: startTools in state idle (expected calling)");
  expect((await result).status).toBe("completed");
  expect(() => (loop as unknown as { nextTurn(): void }).nextTurn()).toThrow("agent loop: nextTurn in state ended (expected calling or running_tools)");
});
