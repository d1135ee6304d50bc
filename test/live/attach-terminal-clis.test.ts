/**
 * `atomic attach` on a real terminal (tmux: send-keys, capture-pane) on stages of the real agent CLIs
 * (test/agents, pinned versions) against their fake providers, as a person uses it (the --json tests are
 * attach-claude, attach-pi and attach-resume-clis):
 * - claude: the view survives a SIGKILL of the stage's worker (it says "worker lost" and follows the next
 *   attempt); in that attempt its Bash tool call shows live, a line typed while the tool runs is a steer that
 *   reaches the model in the same conversation, and claude's answer and the stage's end show.
 * - pi: its tool call shows live, a typed steer reaches the model (pi's own `steer`), its answer and the end.
 * - codex (no input while a turn runs): the view says so; a steer typed while its first model call is out is
 *   delivered, and reaches the model in the same thread resumed once that turn ended.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, processesMatching, spawnAtomic, untilEvent, waitUntil } from "../helpers/atomic.ts";
import { AGENT_STEP_LIMIT_MS, agentTest } from "../helpers/agents.ts";
import { claudeHome, codexHome } from "../helpers/agent-homes.ts";
import { chatAgentSetup, startNetworkTrap } from "../helpers/chat-agents.ts";
import { startFakeAnthropic, text, toolUse } from "../helpers/fake-anthropic.ts";
import { startFakeOpenAI, text as openaiText, toolCall } from "../helpers/fake-openai.ts";
import { say as codexSay, startFakeResponses } from "../helpers/fake-responses.ts";
import { processesWithEnv } from "../helpers/processes.ts";
import { realStages, startStage } from "../helpers/real-agent-stage.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { killTmux, Tmux } from "../helpers/tmux.ts";
import { cleanupNow, cleanupWhenIdle, startedRunId } from "../e2e/support.ts";

const WF_CLAUDE = join(import.meta.dir, "..", "runners", "fixtures", "claude-stage.ts");
const WF_PI = join(import.meta.dir, "..", "runners", "fixtures", "real-agent.ts");
const STEER = "STEER-FROM-THE-TERMINAL";
const codex = realStages(startFakeResponses, codexHome, { runner: "codex" });
afterEach(cleanupWhenIdle);
afterAll(async () => {
  killTmux();
  await cleanupNow();
});

/** A shell command that says it started (a file in `dir`), then waits for `go` there. */
const waitForGo = (dir: string, go: string) => `touch ${join(dir, "started")}; while [ ! -e ${join(dir, go)} ]; do sleep 0.1; done; echo released`;

/** Types a steer on the terminal; resolves once the view shows it delivered to the stage. */
async function steer(t: Tmux): Promise<void> {
  t.type(STEER);
  await t.waitFor(`> ${STEER}`, AGENT_STEP_LIMIT_MS); // Enter once the line has the text (keys in one read can outrun it)
  t.keys("Enter");
  await t.waitFor(new RegExp(`you \\(steer\\) ${STEER} .*\\[delivered`), AGENT_STEP_LIMIT_MS);
}

agentTest("attach on a terminal to a claude stage: through a SIGKILL of its worker to the next attempt, a typed steer reaches the model", async () => {
  const fake = await startFakeAnthropic();
  const { home, env: agentEnv } = claudeHome(fake);
  const marker = `m${crypto.randomUUID().slice(0, 8)}`;
  const env = { ...agentEnv, CLAUDE_TEST_MARKER: marker };
  const dir = makeTempDir("atomic-attach-claude-tmux-");
  let tmux: Tmux | undefined;
  try {
    // Attempt 1's model call is held until its worker is killed; attempt 2 runs a Bash tool that waits, then answers.
    fake.push({ ...text("never said"), hold: new Promise(() => {}) }, toolUse("Bash", { command: waitForGo(dir, "go"), description: "wait" }), text("answer after the steer"));
    const inputs = join(dir, "inputs.json");
    writeFileSync(inputs, JSON.stringify({ prompt: "work", tools: JSON.stringify(["bash"]) }));
    // The stage's cwd is the marker directory: claude runs in its default sandbox, where /tmp is its own.
    const run = spawnAtomic(["run", WF_CLAUDE, "--inputs-json", inputs, "--workers", "1"], { home, cwd: dir, env });
    const runId = startedRunId(await lineWatcher(run.stdout).waitFor(/^started run /, AGENT_STEP_LIMIT_MS));
    await untilEvent(fake.callMatching(), "claude's first model call", { proc: run, limitMs: AGENT_STEP_LIMIT_MS });
    const t = Tmux.atomic(["attach", runId, "ask"], { home, env, cols: 160, rows: 50 });
    tmux = t;
    await t.waitFor("attached to ask", AGENT_STEP_LIMIT_MS);
    const [worker] = processesMatching(home, "--internal-workflow-worker");
    expect(worker).toBeDefined();
    process.kill(worker!, "SIGKILL");
    await t.waitFor("worker lost: attempt 1 started again on another worker", AGENT_STEP_LIMIT_MS);
    await waitUntil(() => existsSync(join(dir, "started")), AGENT_STEP_LIMIT_MS, "the tool to start");
    await t.waitFor(/⚙ Bash .*while \[ ! -e/, AGENT_STEP_LIMIT_MS);
    await steer(t);
    writeFileSync(join(dir, "go"), "");
    await t.waitFor("answer after the steer", AGENT_STEP_LIMIT_MS);
    await t.waitFor("the stage ended: completed", AGENT_STEP_LIMIT_MS);
    expect(await t.exited(AGENT_STEP_LIMIT_MS)).toBe(0);
    expect(await run.exited).toBe(0);
    // The steer went into the conversation of the attempt that followed the lost worker, after its tool call.
    const last = JSON.stringify(fake.calls.at(-1)!.body.messages);
    expect(last).toContain(STEER);
    expect(last).toContain("released");
    fake.assertOnlyFake();
  } finally {
    tmux?.kill();
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

agentTest("attach on a terminal to a pi stage: its tool call live, a typed steer reaches the model, its answer and the end", async () => {
  const trap = startNetworkTrap();
  let s!: ReturnType<typeof chatAgentSetup>;
  const openai = await startFakeOpenAI((req) => (req.body.messages.some((m) => m.role === "tool") ? openaiText("answer after the steer") : toolCall("bash", { command: waitForGo(s.cwd, "go") })));
  let tmux: Tmux | undefined;
  try {
    s = chatAgentSetup("pi", openai.url, { trap });
    const inputs = join(s.cwd, "inputs.json");
    writeFileSync(inputs, JSON.stringify({ runner: "pi", prompt: "work", tools: JSON.stringify(["bash"]) }));
    const run = spawnAtomic(["run", WF_PI, "--inputs-json", inputs], { home: s.home, env: s.env, cwd: s.cwd });
    const runId = startedRunId(await lineWatcher(run.stdout).waitFor(/^started run /, AGENT_STEP_LIMIT_MS));
    const t = Tmux.atomic(["attach", runId, "ask"], { home: s.home, env: s.env, cols: 160, rows: 50 });
    tmux = t;
    await t.waitFor("attached to ask", AGENT_STEP_LIMIT_MS);
    await waitUntil(() => existsSync(join(s.cwd, "started")), AGENT_STEP_LIMIT_MS, "the tool to start");
    await t.waitFor(/⚙ bash .*while \[ ! -e/, AGENT_STEP_LIMIT_MS);
    await steer(t);
    writeFileSync(join(s.cwd, "go"), "");
    await t.waitFor("answer after the steer", AGENT_STEP_LIMIT_MS);
    await t.waitFor("the stage ended: completed", AGENT_STEP_LIMIT_MS);
    expect(await t.exited(AGENT_STEP_LIMIT_MS)).toBe(0);
    expect(await run.exited).toBe(0);
    expect(JSON.stringify(openai.requests.at(-1)!.body.messages)).toContain(STEER);
    expect(trap.strays).toEqual([]);
  } finally {
    tmux?.kill();
    trap.stop();
    await openai.close();
  }
});

agentTest("attach on a terminal to a codex stage: it says codex takes no input mid-turn; a typed steer reaches the model when the thread resumes", async () => {
  const held = Promise.withResolvers<void>();
  const s = await codex({ ...codexSay("first answer"), hold: held.promise }, codexSay("second answer"));
  let tmux: Tmux | undefined;
  try {
    const { proc, runId } = await startStage(s, { prompt: "start" });
    await untilEvent(s.fake.callMatching(), "codex's first model call", { proc, limitMs: AGENT_STEP_LIMIT_MS });
    const t = Tmux.atomic(["attach", runId, "ask"], { home: s.h.home, env: s.h.env, cols: 200, rows: 50 });
    tmux = t;
    await t.waitFor("codex takes no input while its turn runs", AGENT_STEP_LIMIT_MS);
    await steer(t);
    held.resolve();
    await t.waitFor("second answer", AGENT_STEP_LIMIT_MS);
    await t.waitFor("the stage ended: completed", AGENT_STEP_LIMIT_MS);
    expect(await t.exited(AGENT_STEP_LIMIT_MS)).toBe(0);
    expect(await proc.exited).toBe(0);
    const resumed = JSON.stringify(s.fake.calls[1]!.body.input);
    expect(resumed).toContain("first answer");
    expect(resumed).toContain(STEER);
    s.fake.assertOnlyFake();
  } finally {
    held.resolve();
    tmux?.kill();
  }
});
