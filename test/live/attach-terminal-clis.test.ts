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
 * - gemini and opencode (no input while a turn runs either; sessions resumed by id): the view says so, survives
 *   a SIGKILL of the stage's worker and follows the next attempt; there a typed steer and a /followup wait for
 *   the turn's end and reach the model together in the same session resumed; /interrupt TEXT ends the next
 *   turn at once and resumes the session with TEXT; the answer and the stage's end show.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, processesMatching, spawnAtomic, untilEvent, waitUntil } from "../helpers/atomic.ts";
import { AGENT_STEP_LIMIT_MS, agentTest } from "../helpers/agents.ts";
import { claudeHome, codexHome, geminiHome } from "../helpers/agent-homes.ts";
import { chatAgentSetup, MODEL, startNetworkTrap } from "../helpers/chat-agents.ts";
import { startFakeAnthropic, text, toolUse } from "../helpers/fake-anthropic.ts";
import { startFakeOpenAI, text as openaiText, toolCall, type RecordedRequest } from "../helpers/fake-openai.ts";
import { say as codexSay, startFakeResponses } from "../helpers/fake-responses.ts";
import { say as geminiSay, startFakeGemini } from "../helpers/fake-gemini.ts";
import { processesWithEnv } from "../helpers/processes.ts";
import { realStages, startStage } from "../helpers/real-agent-stage.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { killTmux, Tmux } from "../helpers/tmux.ts";
import { cleanupNow, cleanupWhenIdle, startedRunId } from "../e2e/support.ts";

const WF_CLAUDE = join(import.meta.dir, "..", "runners", "fixtures", "claude-stage.ts");
const WF_PI = join(import.meta.dir, "..", "runners", "fixtures", "real-agent.ts");
const STEER = "STEER-FROM-THE-TERMINAL";
const FOLLOW = "FOLLOWUP-FROM-THE-TERMINAL";
const INTERRUPT = "INTERRUPT-FROM-THE-TERMINAL";
const codex = realStages(startFakeResponses, codexHome, { runner: "codex" });
const gemini = realStages(startFakeGemini, geminiHome, { runner: "gemini", model: "gemini-2.5-flash" });
afterEach(cleanupWhenIdle);
afterAll(async () => {
  killTmux();
  await cleanupNow();
});

/** A shell command that says it started (a file in `dir`), then waits for `go` there. */
const waitForGo = (dir: string, go: string) => `touch ${join(dir, "started")}; while [ ! -e ${join(dir, go)} ]; do sleep 0.1; done; echo released`;

/** Types a line on the terminal (a steer, or a command with its text); resolves once the view shows the message delivered to the stage. */
async function typed(t: Tmux, line: string, mode: "steer" | "followUp" | "interrupt", text: string): Promise<void> {
  t.type(line);
  await t.waitFor(`> ${line}`, AGENT_STEP_LIMIT_MS); // Enter once the line has the text (keys in one read can outrun it)
  t.keys("Enter");
  await t.waitFor(new RegExp(`you \\(${mode}\\) ${text} .*\\[delivered`), AGENT_STEP_LIMIT_MS);
}

const steer = (t: Tmux) => typed(t, STEER, "steer", STEER);

/** Kills with SIGKILL every process left with this HOME (a CLI whose worker was killed under it). */
function killStrays(home: string): void {
  for (const pid of processesWithEnv("HOME", home)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // it ended between the listing and the kill
    }
  }
}

/**
 * A CLI that takes no input while its turn runs (gemini, opencode), on a terminal, through the turns its fake
 * provider scripts: attempt 1's model call held for ever; attempt 2's first call held until `release`; the
 * session resumed with the steer and the followUp, held for ever; then resumed with the interrupt's text.
 * `arrived` resolves when a call of that turn reached the provider.
 */
async function resumeCliOnTerminal(o: {
  runner: string;
  home: string;
  env: Record<string, string>;
  runId: string;
  stage: string;
  arrived: { attempt2: Promise<unknown>; resumed: Promise<unknown> };
  release: () => void;
}): Promise<void> {
  const t = Tmux.atomic(["attach", o.runId, o.stage], { home: o.home, env: o.env, cols: 200, rows: 50 });
  try {
    await t.waitFor(`attached to ${o.stage}`, AGENT_STEP_LIMIT_MS);
    await t.waitFor(`${o.runner} takes no input while its turn runs`, AGENT_STEP_LIMIT_MS);
    const [worker] = processesMatching(o.home, "--internal-workflow-worker");
    expect(worker).toBeDefined();
    process.kill(worker!, "SIGKILL");
    await t.waitFor("worker lost: attempt 1 started again on another worker", AGENT_STEP_LIMIT_MS);
    await untilEvent(o.arrived.attempt2, "attempt 2's first model call", { limitMs: AGENT_STEP_LIMIT_MS });
    await steer(t);
    await typed(t, `/followup ${FOLLOW}`, "followUp", FOLLOW);
    o.release();
    await t.waitFor("first answer", AGENT_STEP_LIMIT_MS);
    await untilEvent(o.arrived.resumed, "the session resumed with the steer and the followUp", { limitMs: AGENT_STEP_LIMIT_MS });
    await typed(t, `/interrupt ${INTERRUPT}`, "interrupt", INTERRUPT);
    await t.waitFor("answer after the interrupt", AGENT_STEP_LIMIT_MS);
    await t.waitFor("the stage ended: completed", AGENT_STEP_LIMIT_MS);
    expect(await t.exited(AGENT_STEP_LIMIT_MS)).toBe(0);
  } finally {
    t.kill();
  }
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

agentTest("attach on a terminal to a gemini stage: through a SIGKILL of its worker to the next attempt; a steer and a followUp reach the resumed session, an interrupt ends a turn", async () => {
  const held = Promise.withResolvers<void>();
  const never = new Promise<void>(() => {});
  const s = await gemini({ ...geminiSay("never said"), hold: never }, { ...geminiSay("first answer"), hold: held.promise }, { ...geminiSay("never said either"), hold: never }, geminiSay("answer after the interrupt"));
  try {
    const { proc, runId } = await startStage(s, { prompt: "start" });
    await untilEvent(s.fake.callMatching(), "gemini's first model call", { proc, limitMs: AGENT_STEP_LIMIT_MS });
    const nth = (n: number) => s.fake.callMatching((r) => s.fake.calls.indexOf(r) === n);
    await resumeCliOnTerminal({ runner: "gemini", home: s.h.home, env: s.h.env, runId, stage: "ask", arrived: { attempt2: nth(1), resumed: nth(2) }, release: () => held.resolve() });
    expect(await proc.exited).toBe(0);
    expect(s.fake.calls.length).toBe(4);
    // The steer and the followUp went in together once attempt 2's turn ended, in its session; the interrupt's text after them.
    const resumed = JSON.stringify(s.fake.calls[2]!.body.contents);
    for (const said of ["first answer", STEER, FOLLOW]) expect(resumed).toContain(said);
    const last = JSON.stringify(s.fake.calls[3]!.body.contents);
    for (const said of ["first answer", STEER, INTERRUPT]) expect(last).toContain(said);
    s.fake.assertOnlyFake();
  } finally {
    held.resolve();
    killStrays(s.h.env.HOME!);
  }
});

agentTest("attach on a terminal to an opencode stage: through a SIGKILL of its worker to the next attempt; a steer and a followUp reach the resumed session, an interrupt ends a turn", async () => {
  const trap = startNetworkTrap();
  const held = Promise.withResolvers<void>();
  const attempt2 = Promise.withResolvers<void>();
  const resumed = Promise.withResolvers<void>();
  let killed = false;
  const never = new Promise<void>(() => {});
  const said = (req: RecordedRequest) => JSON.stringify(req.body.messages);
  const openai = await startFakeOpenAI((req) => {
    if (said(req).includes(INTERRUPT)) return openaiText("answer after the interrupt");
    if (said(req).includes(STEER)) {
      resumed.resolve();
      return { ...openaiText("never said either"), hold: never };
    }
    if (!killed) return { ...openaiText("never said"), hold: never };
    attempt2.resolve();
    return { ...openaiText("first answer"), hold: held.promise };
  });
  let s: ReturnType<typeof chatAgentSetup> | undefined;
  try {
    s = chatAgentSetup("opencode", openai.url, { trap });
    const wf = join(import.meta.dir, "..", "runners", "fixtures", "chat-agent-stages.ts");
    const proc = spawnAtomic(["run", wf, "--json", "--workers", "1", "--input", "runner=opencode", "--input", `model=${MODEL}`, "--input", `prompts=${JSON.stringify(["start"])}`], { home: s.home, cwd: s.cwd, env: s.env });
    const runId = JSON.parse(await lineWatcher(proc.stdout).waitFor(/"type":"run_started"/, AGENT_STEP_LIMIT_MS)).runId as string;
    await untilEvent(openai.requestMatching(), "opencode's first model call", { proc, limitMs: AGENT_STEP_LIMIT_MS });
    killed = true; // every call from here on is attempt 2's (the worker is killed once attached)
    await resumeCliOnTerminal({ runner: "opencode", home: s.home, env: s.env, runId, stage: "s0", arrived: { attempt2: attempt2.promise, resumed: resumed.promise }, release: () => held.resolve() });
    expect(await proc.exited).toBe(0);
    // The steer and the followUp went in together, in the session that said the first answer; the interrupt's text after them.
    const assistantSaid = (req: RecordedRequest, text: string) => req.body.messages.some((m) => m.role === "assistant" && String(m.content ?? "").includes(text));
    const withSteer = openai.requests.find((r) => said(r).includes(STEER) && !said(r).includes(INTERRUPT))!;
    expect(said(withSteer)).toContain(FOLLOW);
    expect(assistantSaid(withSteer, "first answer")).toBe(true);
    const last = openai.requests.at(-1)!;
    expect(said(last)).toContain(INTERRUPT);
    expect(assistantSaid(last, "first answer")).toBe(true);
    expect(trap.strays).toEqual([]);
  } finally {
    held.resolve();
    if (s) killStrays(s.env.HOME!);
    trap.stop();
    await openai.close();
  }
});
