/**
 * `atomic attach` on a real terminal (tmux: send-keys, capture-pane) on stages of the real agent CLIs
 * (test/agents, pinned versions) against their fake providers, as a person uses it (the --json test of its
 * own is attach-pi; claude's, codex's, gemini's and opencode's --json view is checked here, below):
 * - claude: the view survives a SIGKILL of the stage's worker (it says "worker lost" and follows the next
 *   attempt); in that attempt its Bash tool call shows live, a line typed while the tool runs is a steer that
 *   reaches the model in the same conversation, a /followup is the turn after, and /interrupt TEXT ends that
 *   turn, TEXT the next; claude's answers and the stage's end show. An `attach --json` beside it says the same
 *   in its events: the tool call while it runs, the steer delivered, the answers and the end (this was
 *   attach-claude, a run of claude of its own).
 * - pi: the same (pi's own `steer`, `follow_up` and `abort`).
 * - codex, gemini and opencode (no input while a turn runs; sessions resumed by id): the view says so, survives
 *   a SIGKILL of the stage's worker and follows the next attempt; there a typed steer and a /followup wait for
 *   the turn's end and reach the model together in the same session resumed; /interrupt TEXT ends the next
 *   turn at once and resumes the session with TEXT; the answer and the stage's end show. An `attach --json`
 *   beside the terminal's, on the same stage, says the same in its events: the notice, the steer delivered,
 *   the answers (the resumed session's too) and the end. (This was attach-resume-clis, a run of each CLI of
 *   its own; typing into `attach --json` is runner-independent: attach.test, attach-pi.)
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
import { realStages, startStage, type RealStage } from "../helpers/real-agent-stage.ts";
import type { LoggedRequest } from "../helpers/fake-provider.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { killTmux, Tmux } from "../helpers/tmux.ts";
import { cleanupNow, cleanupWhenIdle, startedRunId } from "../e2e/support.ts";

import { untilExists } from "../helpers/gate.ts";
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
const waitForGo = (dir: string, go: string) => `touch ${join(dir, "started")}; ${untilExists(join(dir, go))}; echo released`;

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
  const json = spawnAtomic(["--json", "attach", o.runId, o.stage], { home: o.home, env: o.env });
  try {
    await t.waitFor(`attached to ${o.stage}`, AGENT_STEP_LIMIT_MS);
    await t.waitFor(`${o.runner} takes no input while its turn runs`, AGENT_STEP_LIMIT_MS);
    const out = lineWatcher(json.stdout);
    await untilEvent(out.waitFor(/"type":"attached"/, AGENT_STEP_LIMIT_MS), "the --json attach to attach", { proc: json, limitMs: AGENT_STEP_LIMIT_MS });
    const notice = await out.waitFor(/"type":"notice".*takes no input/, AGENT_STEP_LIMIT_MS);
    expect(JSON.parse(notice).text).toStartWith(`${o.runner} takes no input while its turn runs: a steer or /followup typed here waits for the turn's end, then resumes its session with it`);
    // Joined to the stage's transcript and its live stream before the worker goes: the next attempt's answers come live, as text.
    await out.waitFor(/"type":"live"/, AGENT_STEP_LIMIT_MS);
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
    // The --json view beside it: the steer typed on the terminal shown delivered, the session's answers (the
    // resumed one's too) as text, and the stage's end.
    await expectJsonView(out, json, ["first answer", "answer after the interrupt"]);
  } finally {
    t.kill();
    json.kill("SIGKILL");
  }
}

/**
 * A CLI that takes input while its turn runs (claude, pi), on a terminal, while its tool waits for `go` in `dir`:
 * a typed steer and a /followup are delivered; once the tool is let go the model gets the steer in that turn
 * (its answer shows), the followUp is the next turn, held at the provider until `followUpCall` arrived; there
 * /interrupt TEXT ends that turn and TEXT is the turn after it, whose answer and the stage's end show.
 */
/** The `attach --json` view beside the terminal's, once the stage ended: exit 0, the steer shown delivered, `answers` as text. */
async function expectJsonView(out: ReturnType<typeof lineWatcher>, json: { exited: Promise<number> }, answers: string[]): Promise<void> {
  await out.waitFor(/"type":"ended"/, AGENT_STEP_LIMIT_MS);
  expect(await json.exited).toBe(0);
  const events = out.lines.map((l) => JSON.parse(l) as { type: string; mode?: string; state?: string; text?: string });
  expect(events.some((e) => e.type === "message" && e.mode === "steer" && e.text === STEER && e.state === "delivered")).toBe(true);
  const texts = events.flatMap((e) => (e.type === "text" ? [e.text ?? ""] : [])).join("");
  for (const answer of answers) expect(texts).toContain(answer);
}

async function talkDuringTool(t: Tmux, dir: string, followUpCall: Promise<unknown>): Promise<void> {
  await steer(t);
  await typed(t, `/followup ${FOLLOW}`, "followUp", FOLLOW);
  writeFileSync(join(dir, "go"), "");
  await t.waitFor("answer after the steer", AGENT_STEP_LIMIT_MS);
  await untilEvent(followUpCall, "the followUp's turn", { limitMs: AGENT_STEP_LIMIT_MS });
  await typed(t, `/interrupt ${INTERRUPT}`, "interrupt", INTERRUPT);
  await t.waitFor("answer after the interrupt", AGENT_STEP_LIMIT_MS);
  await t.waitFor("the stage ended: completed", AGENT_STEP_LIMIT_MS);
  expect(await t.exited(AGENT_STEP_LIMIT_MS)).toBe(0);
}

agentTest("attach on a terminal to a claude stage: through a SIGKILL of its worker to the next attempt; a typed steer reaches the model in its turn, a followUp the next, an interrupt ends that one", async () => {
  const fake = await startFakeAnthropic();
  const { home, env: agentEnv } = claudeHome(fake);
  const marker = `m${crypto.randomUUID().slice(0, 8)}`;
  const env = { ...agentEnv, CLAUDE_TEST_MARKER: marker };
  const dir = makeTempDir("atomic-attach-claude-tmux-");
  let tmux: Tmux | undefined;
  let json: ReturnType<typeof spawnAtomic> | undefined;
  try {
    // Attempt 1's model call is held until its worker is killed; attempt 2 runs a Bash tool that waits, then answers.
    const never = new Promise<void>(() => {});
    fake.push(
      { ...text("never said"), hold: never },
      toolUse("Bash", { command: waitForGo(dir, "go"), description: "wait" }),
      text("answer after the steer"),
      { ...text("never said either"), hold: never },
      text("answer after the interrupt"),
    );
    const inputs = join(dir, "inputs.json");
    writeFileSync(inputs, JSON.stringify({ prompt: "work", tools: JSON.stringify(["bash"]) }));
    // The stage's cwd is the marker directory: claude runs in its default sandbox, where /tmp is its own.
    const run = spawnAtomic(["run", WF_CLAUDE, "--inputs-json", inputs, "--workers", "1"], { home, cwd: dir, env });
    const runId = startedRunId(await lineWatcher(run.stdout).waitFor(/^started run /, AGENT_STEP_LIMIT_MS));
    await untilEvent(fake.callMatching(), "claude's first model call", { proc: run, limitMs: AGENT_STEP_LIMIT_MS });
    const t = Tmux.atomic(["attach", runId, "ask"], { home, env, cols: 160, rows: 50 });
    tmux = t;
    json = spawnAtomic(["--json", "attach", runId, "ask"], { home, env });
    const out = lineWatcher(json.stdout);
    await t.waitFor("attached to ask", AGENT_STEP_LIMIT_MS);
    await untilEvent(out.waitFor(/"type":"attached"/, AGENT_STEP_LIMIT_MS), "the --json attach to attach", { proc: json, limitMs: AGENT_STEP_LIMIT_MS });
    // Joined to the stage's transcript and its live stream before the worker goes: the next attempt's tool call and answers come live.
    await out.waitFor(/"type":"live"/, AGENT_STEP_LIMIT_MS);
    const [worker] = processesMatching(home, "--internal-workflow-worker");
    expect(worker).toBeDefined();
    process.kill(worker!, "SIGKILL");
    await t.waitFor("worker lost: attempt 1 started again on another worker", AGENT_STEP_LIMIT_MS);
    await waitUntil(() => existsSync(join(dir, "started")), AGENT_STEP_LIMIT_MS, "the tool to start");
    await t.waitFor(/⚙ Bash .*until \[ -e/, AGENT_STEP_LIMIT_MS);
    // The --json view beside it: the tool call, live, while the tool runs.
    await out.waitFor(/"type":"tool".*Bash/, AGENT_STEP_LIMIT_MS);
    await talkDuringTool(t, dir, fake.callMatching((r) => JSON.stringify(r.body.messages).includes(FOLLOW)));
    expect(await run.exited).toBe(0);
    // ... the steer typed on the terminal shown delivered, claude's answers as text, and the stage's end (this was
    // attach-claude, a run of claude of its own; typing into `attach --json` is runner-independent: attach.test, attach-pi).
    await expectJsonView(out, json, ["answer after the steer", "answer after the interrupt"]);
    // The steer went into the conversation of the attempt that followed the lost worker, after its tool call; the
    // followUp was the turn after its answer, and the interrupt's text the turn after that, in the same conversation.
    const said = (n: number) => JSON.stringify(fake.calls[n]!.body.messages);
    expect(fake.calls).toHaveLength(5);
    expect(said(2)).toContain(STEER);
    expect(said(2)).toContain("released");
    expect(said(2)).not.toContain(FOLLOW);
    for (const text of [STEER, "answer after the steer", FOLLOW]) expect(said(3)).toContain(text);
    for (const text of [STEER, "answer after the steer", INTERRUPT]) expect(said(4)).toContain(text);
    fake.assertOnlyFake();
  } finally {
    tmux?.kill();
    json?.kill("SIGKILL");
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

agentTest("attach on a terminal to a pi stage: through a SIGKILL of its worker to the next attempt; a typed steer reaches the model in its turn, a followUp the next, an interrupt ends that one", async () => {
  const trap = startNetworkTrap();
  let s!: ReturnType<typeof chatAgentSetup>;
  const never = new Promise<void>(() => {});
  const said = (req: RecordedRequest) => JSON.stringify(req.body.messages);
  let killed = false;
  const openai = await startFakeOpenAI((req) => {
    if (!killed) return { ...openaiText("never said"), hold: never }; // attempt 1's call, out until its worker is killed
    if (said(req).includes(INTERRUPT)) return openaiText("answer after the interrupt");
    if (said(req).includes(FOLLOW)) return { ...openaiText("never said"), hold: never };
    return req.body.messages.some((m) => m.role === "tool") ? openaiText("answer after the steer") : toolCall("bash", { command: waitForGo(s.cwd, "go") });
  });
  let tmux: Tmux | undefined;
  try {
    s = chatAgentSetup("pi", openai.url, { trap });
    const inputs = join(s.cwd, "inputs.json");
    writeFileSync(inputs, JSON.stringify({ runner: "pi", prompt: "work", tools: JSON.stringify(["bash"]) }));
    const run = spawnAtomic(["run", WF_PI, "--inputs-json", inputs, "--workers", "1"], { home: s.home, env: s.env, cwd: s.cwd });
    const runId = startedRunId(await lineWatcher(run.stdout).waitFor(/^started run /, AGENT_STEP_LIMIT_MS));
    await untilEvent(openai.requestMatching(), "pi's first model call", { proc: run, limitMs: AGENT_STEP_LIMIT_MS });
    const t = Tmux.atomic(["attach", runId, "ask"], { home: s.home, env: s.env, cols: 160, rows: 50 });
    tmux = t;
    await t.waitFor("attached to ask", AGENT_STEP_LIMIT_MS);
    const [worker] = processesMatching(s.home, "--internal-workflow-worker");
    expect(worker).toBeDefined();
    killed = true;
    process.kill(worker!, "SIGKILL");
    await t.waitFor("worker lost: attempt 1 started again on another worker", AGENT_STEP_LIMIT_MS);
    await waitUntil(() => existsSync(join(s.cwd, "started")), AGENT_STEP_LIMIT_MS, "the tool to start");
    await t.waitFor(/⚙ bash .*until \[ -e/, AGENT_STEP_LIMIT_MS);
    await talkDuringTool(t, s.cwd, openai.requestMatching((r) => said(r).includes(FOLLOW)));
    expect(await run.exited).toBe(0);
    // The steer in the tool's turn, the followUp the turn after its answer, the interrupt's text the one after that.
    const afterTool = openai.requests.find((r) => r.body.messages.some((m) => m.role === "tool"))!;
    expect(said(afterTool)).toContain(STEER);
    expect(said(afterTool)).not.toContain(FOLLOW);
    const last = openai.requests.at(-1)!;
    for (const text of [STEER, "answer after the steer", FOLLOW, INTERRUPT]) expect(said(last)).toContain(text);
    expect(trap.strays).toEqual([]);
  } finally {
    tmux?.kill();
    if (s) killStrays(s.env.HOME!);
    trap.stop();
    await openai.close();
  }
});

/**
 * codex or gemini (a fake provider whose replies are queued, one per model call): attempt 1's call held for ever
 * until its worker is killed, attempt 2's through a steer, a followUp and an interrupt (resumeCliOnTerminal); the
 * provider's request log shows each message in the same session. `said` is what a call sent the model.
 */
async function queuedResumeCli<R>(runner: "codex" | "gemini", start: (...replies: R[]) => Promise<RealStage<R>>, say: (text: string) => R, said: (call: LoggedRequest) => unknown) {
  const held = Promise.withResolvers<void>();
  const never = new Promise<void>(() => {});
  const s = await start({ ...say("never said"), hold: never }, { ...say("first answer"), hold: held.promise }, { ...say("never said either"), hold: never }, say("answer after the interrupt"));
  try {
    const { proc, runId } = await startStage(s, { prompt: "start" });
    await untilEvent(s.fake.callMatching(), `${runner}'s first model call`, { proc, limitMs: AGENT_STEP_LIMIT_MS });
    const nth = (n: number) => s.fake.callMatching((r) => s.fake.calls.indexOf(r) === n);
    await resumeCliOnTerminal({ runner, home: s.h.home, env: s.h.env, runId, stage: "ask", arrived: { attempt2: nth(1), resumed: nth(2) }, release: () => held.resolve() });
    expect(await proc.exited).toBe(0);
    expect(s.fake.calls.length).toBe(4);
    // The steer and the followUp went in together once attempt 2's turn ended, in its session; the interrupt's text after them.
    const resumed = JSON.stringify(said(s.fake.calls[2]!));
    for (const text of ["first answer", STEER, FOLLOW]) expect(resumed).toContain(text);
    const last = JSON.stringify(said(s.fake.calls[3]!));
    for (const text of ["first answer", INTERRUPT]) expect(last).toContain(text);
    s.fake.assertOnlyFake();
  } finally {
    held.resolve();
    killStrays(s.h.env.HOME!);
  }
}

agentTest("attach on a terminal to a codex stage: through a SIGKILL of its worker to the next attempt; a steer and a followUp reach the resumed thread, an interrupt ends a turn", () =>
  queuedResumeCli("codex", codex, (t) => codexSay(t), (call) => call.body.input),
);

agentTest("attach on a terminal to a gemini stage: through a SIGKILL of its worker to the next attempt; a steer and a followUp reach the resumed session, an interrupt ends a turn", () =>
  queuedResumeCli("gemini", gemini, (t) => geminiSay(t), (call) => call.body.contents),
);

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
