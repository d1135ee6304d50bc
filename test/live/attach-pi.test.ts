/**
 * `atomic attach --json` on a stage of the real pi CLI (test/agents, pinned
 * version) pointed at the fake OpenAI-compatible provider: the tool call
 * shows live with its arguments, a steer written to attach's stdin while
 * the tool runs reaches the model in the same conversation (pi's own
 * `steer`), and pi's answer shows as text before the stage's end.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { AGENT_STEP_LIMIT_MS, agentTest } from "../helpers/agents.ts";
import { chatAgentSetup, startNetworkTrap } from "../helpers/chat-agents.ts";
import { startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, startedRunId } from "../e2e/support.ts";

import { untilExists } from "../helpers/gate.ts";
const WF = join(import.meta.dir, "..", "runners", "fixtures", "real-agent.ts");
afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

agentTest("attach to a pi stage: its tool call live, a steer from attach reaches the model, its answer", async () => {
  const trap = startNetworkTrap();
  let s!: ReturnType<typeof chatAgentSetup>;
  const openai = await startFakeOpenAI((req) => {
    if (req.body.messages.some((m) => m.role === "tool")) return text("answer after the steer");
    const wait = `touch ${join(s.cwd, "started")}; ${untilExists(join(s.cwd, "go"))}; echo released`;
    return toolCall("bash", { command: wait });
  });
  try {
    s = chatAgentSetup("pi", openai.url, { trap });
    const inputs = join(s.cwd, "inputs.json");
    writeFileSync(inputs, JSON.stringify({ runner: "pi", prompt: "work", tools: JSON.stringify(["bash"]) }));
    const run = spawnAtomic(["run", WF, "--inputs-json", inputs], { home: s.home, env: s.env, cwd: s.cwd });
    const runId = startedRunId(await lineWatcher(run.stdout).waitFor(/^started run /, AGENT_STEP_LIMIT_MS));
    // Its tool runs: the stage has started (attaching to a stage not started yet is refused, unknown_stage; on a busy
    // machine the run may not have reached it when it says it started).
    await waitUntil(() => existsSync(join(s.cwd, "started")), AGENT_STEP_LIMIT_MS, "the tool to start");
    const attach = spawnAtomic(["--json", "attach", runId, "ask"], { home: s.home, env: s.env });
    const out = lineWatcher(attach.stdout);
    await out.waitFor(/"type":"attached"/, AGENT_STEP_LIMIT_MS);
    // The tool call was streamed (attach may have subscribed after it: then the transcript has it).
    await out.waitFor(/"type":"(tool|transcript)".*bash/, AGENT_STEP_LIMIT_MS);
    attach.stdin.write("STEER-FROM-ATTACH\n");
    attach.stdin.flush();
    await out.waitFor(/"type":"message".*"state":"delivered"/, AGENT_STEP_LIMIT_MS);
    // The answer comes live once attach joined the stage's transcript and its live stream (before, it would be transcript).
    await out.waitFor(/"type":"live"/, AGENT_STEP_LIMIT_MS);
    writeFileSync(join(s.cwd, "go"), "");
    await out.waitFor(/"type":"text".*answer after the steer/, AGENT_STEP_LIMIT_MS);
    await out.waitFor(/"type":"ended"/, AGENT_STEP_LIMIT_MS);
    expect(await attach.exited).toBe(0);
    expect(await run.exited).toBe(0);
    expect(JSON.stringify(openai.requests.at(-1)!.body.messages)).toContain("STEER-FROM-ATTACH");
    expect(trap.strays).toEqual([]);
  } finally {
    trap.stop();
    await openai.close();
  }
});
