/**
 * `atomic attach --json` on a stage of the real Claude Code CLI (test/agents, pinned version) pointed at the
 * fake Anthropic provider (as test/runners/claude-real.test.ts): the tool call shows live with its
 * arguments, a steer written to attach's stdin while the tool runs reaches the model in the same
 * conversation, and claude's answer shows as text before the stage's end.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { AGENT_STEP_LIMIT_MS, agentTest } from "../helpers/agents.ts";
import { claudeHome } from "../helpers/agent-homes.ts";
import { startFakeAnthropic, text, toolUse } from "../helpers/fake-anthropic.ts";
import { processesWithEnv } from "../helpers/processes.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, startedRunId } from "../e2e/support.ts";

import { untilExists } from "../helpers/gate.ts";
const WF = join(import.meta.dir, "..", "runners", "fixtures", "claude-stage.ts");
afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

agentTest("attach to a claude stage: its tool call live, a steer from attach reaches the model, its answer", async () => {
  const fake = await startFakeAnthropic();
  const { home, env: agentEnv } = claudeHome(fake);
  const marker = `m${crypto.randomUUID().slice(0, 8)}`;
  const env = { ...agentEnv, CLAUDE_TEST_MARKER: marker };
  const dir = makeTempDir("atomic-attach-claude-gate-");
  try {
    const wait = `touch ${join(dir, "started")}; ${untilExists(join(dir, "go"))}; echo released`;
    fake.push(toolUse("Bash", { command: wait, description: "wait" }), text("answer after the steer"));
    const inputs = join(dir, "inputs.json");
    writeFileSync(inputs, JSON.stringify({ prompt: "work", tools: JSON.stringify(["bash"]) }));
    // The stage's cwd is the marker directory: claude runs in its default sandbox, where /tmp is its own.
    const run = spawnAtomic(["run", WF, "--inputs-json", inputs], { home, cwd: dir, env });
    const runId = startedRunId(await lineWatcher(run.stdout).waitFor(/^started run /, AGENT_STEP_LIMIT_MS));
    // Its tool runs: the stage has started (attaching to a stage not started yet is refused, unknown_stage; on a busy
    // machine the run may not have reached it when it says it started).
    await waitUntil(() => existsSync(join(dir, "started")), AGENT_STEP_LIMIT_MS, "the tool to start");
    const attach = spawnAtomic(["--json", "attach", runId, "ask"], { home, env });
    const out = lineWatcher(attach.stdout);
    await out.waitFor(/"type":"attached"/, AGENT_STEP_LIMIT_MS);
    // The tool call was streamed (attach may have subscribed after it: then the transcript has it).
    await out.waitFor(/"type":"(tool|transcript)".*Bash/, AGENT_STEP_LIMIT_MS);
    attach.stdin.write("STEER-FROM-ATTACH\n");
    attach.stdin.flush();
    await out.waitFor(/"type":"message".*"state":"delivered"/, AGENT_STEP_LIMIT_MS);
    // The answer comes live once attach joined the stage's transcript and its live stream (before, it would be transcript).
    await out.waitFor(/"type":"live"/, AGENT_STEP_LIMIT_MS);
    writeFileSync(join(dir, "go"), "");
    await out.waitFor(/"type":"text".*answer after the steer/, AGENT_STEP_LIMIT_MS);
    await out.waitFor(/"type":"ended"/, AGENT_STEP_LIMIT_MS);
    expect(await attach.exited).toBe(0);
    expect(await run.exited).toBe(0);
    expect(JSON.stringify(fake.calls[1]!.body.messages)).toContain("STEER-FROM-ATTACH");
    fake.assertOnlyFake();
  } finally {
    for (const pid of processesWithEnv("CLAUDE_TEST_MARKER", marker)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // it ended between the listing and the kill
      }
    }
    await fake.close();
  }
});
