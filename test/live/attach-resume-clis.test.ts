/**
 * `atomic attach --json` on stages of the real codex, gemini and opencode
 * CLIs (test/agents, pinned versions), each pointed at its fake provider.
 * None of the three takes input while a turn runs: attach says so when it
 * attaches, a steer typed into it while the first model call is out is
 * taken (its delivery state shows) and reaches the model once that turn
 * ended, in the same session resumed (the provider's request log shows the
 * first answer and the steer in one conversation); the view follows the
 * stage to the resumed turn's text and the stage's end. One CLI run per
 * test (the first turn and its resume).
 */

import { afterAll, afterEach, expect } from "bun:test";
import { join } from "node:path";
import { lineWatcher, spawnAtomic, untilEvent } from "../helpers/atomic.ts";
import { AGENT_STEP_LIMIT_MS, agentTest } from "../helpers/agents.ts";
import { codexHome, geminiHome } from "../helpers/agent-homes.ts";
import { chatAgentSetup, MODEL, startNetworkTrap } from "../helpers/chat-agents.ts";
import { startFakeOpenAI, text, type RecordedRequest } from "../helpers/fake-openai.ts";
import { say as geminiSay, startFakeGemini } from "../helpers/fake-gemini.ts";
import { say as codexSay, startFakeResponses } from "../helpers/fake-responses.ts";
import { realStages, startStage } from "../helpers/real-agent-stage.ts";
import { cleanupNow, cleanupWhenIdle } from "../e2e/support.ts";

const STEER = "STEER-FROM-ATTACH";
const codex = realStages(startFakeResponses, codexHome, { runner: "codex" });
const gemini = realStages(startFakeGemini, geminiHome, { runner: "gemini", model: "gemini-2.5-flash" });
afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

/**
 * Attaches to the stage while its first model call is held, types a steer, then lets the call go (`release`):
 * the steer is taken, the stage's resumed turn answers, and attach ends with the stage.
 */
async function steerThroughAttach(opts: { home: string; env: Record<string, string>; runId: string; stage: string; runner: string; release: () => void }) {
  const attach = spawnAtomic(["--json", "attach", opts.runId, opts.stage], { home: opts.home, env: opts.env });
  const out = lineWatcher(attach.stdout);
  await untilEvent(out.waitFor(/"type":"attached"/, AGENT_STEP_LIMIT_MS), "attach to attach", { proc: attach, limitMs: AGENT_STEP_LIMIT_MS });
  const notice = await out.waitFor(/"type":"notice"/, AGENT_STEP_LIMIT_MS);
  expect(JSON.parse(notice).text).toStartWith(`${opts.runner} takes no input while its turn runs: a steer or /followup typed here waits for the turn's end, then resumes its session with it`);
  attach.stdin.write(`${STEER}\n`);
  attach.stdin.flush();
  await out.waitFor(new RegExp(`"type":"message".*"mode":"steer".*"text":"${STEER}"`), AGENT_STEP_LIMIT_MS);
  // The turn is let go only once the runner holds the steer (delivered): released when it is merely queued in the
  // journal, the turn could end before the message reached the stage, which then ended with it undeliverable.
  await out.waitFor(/"type":"message".*"state":"delivered"/, AGENT_STEP_LIMIT_MS);
  await out.waitFor(/"type":"live"/, AGENT_STEP_LIMIT_MS); // the answer then comes live, not as the transcript's
  opts.release();
  await out.waitFor(/"type":"text".*second answer/, AGENT_STEP_LIMIT_MS);
  await out.waitFor(/"type":"ended"/, AGENT_STEP_LIMIT_MS);
  expect(await attach.exited).toBe(0);
  return out.lines.map((l) => JSON.parse(l) as { type: string; state?: string; text?: string });
}

agentTest("attach to a codex stage: it says codex takes no input mid-turn; a typed steer reaches the model when the thread resumes", async () => {
  const held = Promise.withResolvers<void>();
  const s = await codex({ ...codexSay("first answer"), hold: held.promise }, codexSay("second answer"));
  const { proc, runId } = await startStage(s, { prompt: "start" });
  await untilEvent(s.fake.callMatching(), "codex's first model call", { proc, limitMs: AGENT_STEP_LIMIT_MS });
  await steerThroughAttach({ home: s.h.home, env: s.h.env, runId, stage: "ask", runner: "codex", release: () => held.resolve() });
  expect(await proc.exited).toBe(0);
  expect(s.fake.calls.length).toBe(2);
  const resumed = JSON.stringify(s.fake.calls[1]!.body.input);
  expect(resumed).toContain("first answer");
  expect(resumed).toContain(STEER);
  s.fake.assertOnlyFake();
});

agentTest("attach to a gemini stage: it says gemini takes no input mid-turn; a typed steer reaches the model when the session resumes", async () => {
  const held = Promise.withResolvers<void>();
  const s = await gemini({ ...geminiSay("first answer"), hold: held.promise }, geminiSay("second answer"));
  const { proc, runId } = await startStage(s, { prompt: "start" });
  await untilEvent(s.fake.callMatching(), "gemini's first model call", { proc, limitMs: AGENT_STEP_LIMIT_MS });
  await steerThroughAttach({ home: s.h.home, env: s.h.env, runId, stage: "ask", runner: "gemini", release: () => held.resolve() });
  expect(await proc.exited).toBe(0);
  expect(s.fake.calls.length).toBe(2);
  const resumed = JSON.stringify(s.fake.calls[1]!.body.contents);
  expect(resumed).toContain("first answer");
  expect(resumed).toContain(STEER);
  s.fake.assertOnlyFake();
});

agentTest("attach to an opencode stage: it says opencode takes no input mid-turn; a typed steer reaches the model when the session resumes", async () => {
  const trap = startNetworkTrap();
  const held = Promise.withResolvers<void>();
  const lastUser = (req: RecordedRequest) => String(req.body.messages.filter((m) => m.role === "user").at(-1)?.content ?? "");
  const openai = await startFakeOpenAI((req) => (JSON.stringify(req.body.messages).includes(STEER) ? text("second answer") : { ...text("first answer"), hold: held.promise }));
  try {
    const s = chatAgentSetup("opencode", openai.url, { trap });
    const wf = join(import.meta.dir, "..", "runners", "fixtures", "chat-agent-stages.ts");
    const proc = spawnAtomic(["run", wf, "--json", "--workers", "1", "--input", "runner=opencode", "--input", `model=${MODEL}`, "--input", `prompts=${JSON.stringify(["HOLD first"])}`], { home: s.home, cwd: s.cwd, env: s.env });
    const out = lineWatcher(proc.stdout);
    const runId = JSON.parse(await out.waitFor(/"type":"run_started"/, AGENT_STEP_LIMIT_MS)).runId as string;
    await untilEvent(openai.requestMatching((r) => lastUser(r).includes("HOLD first")), "opencode's first model call", { proc, limitMs: AGENT_STEP_LIMIT_MS });
    await steerThroughAttach({ home: s.home, env: s.env, runId, stage: "s0", runner: "opencode", release: () => held.resolve() });
    expect(await proc.exited).toBe(0);
    const resumed = openai.requests.find((r) => lastUser(r).includes(STEER))!;
    expect(resumed.body.messages.some((m) => m.role === "assistant" && String(m.content ?? "").includes("first answer"))).toBe(true);
    expect(trap.strays).toEqual([]);
  } finally {
    held.resolve();
    trap.stop();
    await openai.close();
  }
});
