/**
 * `atomic attach` through the real binary, on a real terminal (tmux) and with --json, against the fake
 * provider: the conversation so far, then live text and tool calls; a typed steer, a /followup and an
 * /interrupt reach the model in the same conversation (the provider's request log shows them); the view
 * (on the terminal and --json) survives a SIGKILL of the stage's worker and follows the attempt started
 * again; a finished stage prints
 * its transcript and says it ended; an unknown run or stage is one sentence and a hint; /help lists the
 * commands, a malformed /answer or an unknown command is said and sends nothing, /detach, Ctrl-D and Ctrl-C
 * leave the stage running; an agent's ask_user question shows with its id and `/answer ID TEXT` typed in attach answers it
 * (the model gets it as the call's result); watchers attaching while a stage streams fast see every word once, in
 * order (transcript so far, then live).
 */

import { afterAll, afterEach, expect } from "bun:test";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { killSpawned, lineWatcher, processesMatching, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { killTmux, Tmux } from "../helpers/tmux.ts";
import { startFakeOpenAI, type RecordedRequest, type Reply } from "../helpers/fake-openai.ts";
import { join } from "node:path";
import { startChat, watchersSeeEveryWordOnce } from "./support.ts";

const ASK_USER = join(import.meta.dir, "..", "runners", "fixtures", "ask-user.ts");

// Not killTmux() after each test: the tests run concurrently (each kills its own server when done).
afterEach(cleanupWhenIdle);
afterAll(async () => {
  killTmux();
  await killSpawned();
  await cleanupNow();
});

const said = (req: RecordedRequest, text: string) => req.body.messages.some((m) => m.role === "user" && typeof m.content === "string" && m.content.includes(text));

/** A chat run against `fake` (its first call out) and `atomic attach` to its stage on a terminal (tmux), attached. */
async function attachedChat(fake: { url: string; requestMatching(): Promise<unknown> }, prefix: string) {
  const home = makeTempDir(prefix);
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
  const run = await startChat(home, env, ["--workers", "1"]);
  await fake.requestMatching();
  const t = Tmux.atomic(["attach", run.runId, "chat"], { home, env, cols: 120, rows: 40 });
  await t.waitFor("attached to chat");
  return { home, env, run, t };
}

e2eTest("attach on a terminal: through a SIGKILL of the stage's worker to the next attempt; live text and tools; a steer, a followup and an interrupt reach the model", async () => {
  const gates = [0, 1, 2].map(() => Promise.withResolvers<void>());
  const replies: Reply[] = [
    { text: "never said", hold: new Promise(() => {}) }, // attempt 1's call, out until its worker is killed
    { text: "Looking around. ", toolCalls: [{ name: "list", arguments: {} }], hold: gates[0]!.promise, usage: { prompt: 11, completion: 4 } },
    { text: "Steered by you.", hold: gates[1]!.promise },
    { text: "never finished", hold: gates[2]!.promise },
    { text: "Bye now." },
  ];
  const fake = await startFakeOpenAI((_req, i) => replies[Math.min(i, replies.length - 1)]!);
  let tmux: Tmux | undefined;
  try {
    const { home, env, run, t } = await attachedChat(fake, "atomic-attach-home-");
    tmux = t;
    const [worker] = processesMatching(home, "--internal-workflow-worker");
    expect(worker).toBeDefined();
    process.kill(worker!, "SIGKILL");
    await t.waitFor("worker lost: attempt 1 started again on another worker");
    await fake.requestMatching((r) => r !== fake.requests[0]); // attempt 2's first call
    // A steer while that call is out: the loop takes it into its next call.
    t.type("use the README");
    t.keys("Enter");
    await t.waitFor(/you \(steer\) use the README .*\[delivered/);
    gates[0]!.resolve();
    await t.waitFor("⚙ list");
    await t.waitFor("Looking around.");
    await t.waitFor("· turn: 11 in, 4 out"); // the usage of the turn
    const second = await fake.requestMatching((r) => said(r, "use the README"));
    expect(second.body.messages.some((m) => m.role === "tool")).toBe(true); // the same conversation, after the tool call
    t.type("/followup then summarize");
    t.keys("Enter");
    await t.waitFor(/you \(followUp\) then summarize .*\[delivered/);
    gates[1]!.resolve();
    await t.waitFor("Steered by you.");
    await fake.requestMatching((r) => said(r, "then summarize"));
    t.type("/interrupt stop now");
    t.keys("Enter");
    const last = await fake.requestMatching((r) => said(r, "stop now"));
    expect(said(last, "then summarize")).toBe(true);
    expect(fake.requests[3]!.aborted).toBe(true); // the held call was ended by the interrupt
    await t.waitFor("Bye now.");
    await t.waitFor("the stage ended: completed");
    expect(await t.exited()).toBe(0);
    expect(await run.proc.exited).toBe(0);
    gates[2]!.resolve();

    // Attaching to the stage now that it ended: the transcript, and that it ended.
    const after = await runAtomic(["attach", run.runId, "chat"], { home, env });
    expect(after.code).toBe(0);
    expect(after.stdout).toContain("the conversation so far");
    expect(after.stdout).toContain("Bye now.");
    expect(after.stdout).toContain("the stage ended: completed");
  } finally {
    tmux?.kill();
    await fake.close();
  }
});

e2eTest("attach --json follows a stage through a SIGKILL of its worker; bad runs and stages are refused", async () => {
  const gate = Promise.withResolvers<void>();
  let calls = 0;
  const fake = await startFakeOpenAI(() => (++calls === 1 ? { text: ["first ", "words"], paceMs: 100, hold: new Promise(() => {}) } : { text: ["second ", "try"], hold: gate.promise }));
  const home = makeTempDir("atomic-attach-json-");
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
  try {
    const run = await startChat(home, env, ["--workers", "1"]);
    await fake.requestMatching();
    const attach = spawnAtomic(["--json", "attach", run.runId, "chat"], { home, env });
    const out = lineWatcher(attach.stdout);
    await out.waitFor(/"type":"attached"/);
    const [worker] = processesMatching(home, "--internal-workflow-worker");
    expect(worker).toBeDefined();
    process.kill(worker!, "SIGKILL");
    await out.waitFor(/"type":"state".*"state":"worker_lost"/);
    await fake.requestMatching((r) => r !== fake.requests[0]);
    gate.resolve();
    await out.waitFor(/"type":"text".*"text":"try"|"text":"second try"/);
    await out.waitFor(/"type":"ended"/);
    expect(await attach.exited).toBe(0);
    const lines = out.lines.map((l) => JSON.parse(l) as { type: string; text?: string; stage: string; path: string });
    expect(lines[0]).toMatchObject({ type: "attached", stage: "0", path: "chat" });
    expect(lines.filter((l) => l.type === "text").map((l) => l.text).join("")).toContain("second try");
    expect(await run.proc.exited).toBe(0);

    const unknown = await runAtomic(["attach", "zzzzzzzz"], { home, env });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("no run with id zzzzzzzz");
    expect(unknown.stderr).toContain("another journal");
    const noStage = await runAtomic(["attach", run.runId, "nope"], { home, env });
    expect(noStage.code).toBe(2);
    expect(noStage.stderr).toContain('has no stage "nope"');
    expect(noStage.stderr).toContain("chat");
    const ended = await runAtomic(["attach", run.runId], { home, env });
    expect(ended.code).toBe(2);
    expect(ended.stderr).toContain("no stage of it is running");
  } finally {
    await fake.close();
  }
});

e2eTest("attach without STAGE follows the run's active stages; Tab switches, and a line goes to the stage shown", async () => {
  const gate = Promise.withResolvers<void>();
  const fake = await startFakeOpenAI((req) => ({ text: said(req, "left side") ? "left done" : "right done", hold: gate.promise }));
  const home = makeTempDir("atomic-attach-pair-");
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
  let tmux: Tmux | undefined;
  try {
    const proc = spawnAtomic(["--json", "run", join(import.meta.dir, "fixtures", "pair.ts"), "--workers", "2"], { home, env, cwd: makeTempDir("atomic-live-cwd-") });
    const out = lineWatcher(proc.stdout);
    const runId = /"runId":"([0-9a-z]+)"/.exec(await out.waitFor(/"runId":"[0-9a-z]+"/))![1]!;
    await fake.requestMatching((r) => said(r, "left side"));
    await fake.requestMatching((r) => said(r, "right side"));
    const t = Tmux.atomic(["attach", runId], { home, env, cols: 120, rows: 30 });
    tmux = t;
    const first = await t.waitFor(/attached to (left|right)/);
    const other = /attached to left/.test(first) ? "right" : "left";
    t.keys("Tab");
    await t.waitFor(`following ${other}`);
    t.type("only for the other one");
    t.keys("Enter");
    await t.waitFor(/you \(steer\) only for the other one .*\[(delivered|queued)/);
    const inbox = JSON.parse((await runAtomic(["inbox", runId, "--json"], { home, env })).stdout) as { stages: { stage: string; messages: { text: string }[] }[] };
    expect(inbox.stages.map((st) => st.stage)).toEqual([other]);
    gate.resolve();
    await t.waitFor("the run ended: completed");
    expect(await t.exited()).toBe(0);
    expect(await proc.exited).toBe(0);
  } finally {
    tmux?.kill();
    await fake.close();
  }
});

e2eTest("attach's /help lists the commands, a malformed or unknown command is said and sends nothing, /detach (Ctrl-D, Ctrl-C) leaves with the stage going on", async () => {
  const gate = Promise.withResolvers<void>();
  const fake = await startFakeOpenAI(() => ({ text: "Done at last.", hold: gate.promise }));
  let tmux: Tmux | undefined;
  try {
    const { home, env, run, t } = await attachedChat(fake, "atomic-attach-cmds-");
    tmux = t;
    t.type("/help");
    t.keys("Enter");
    await t.waitFor("/answer ID TEXT     answer a question of the run");
    await t.waitFor("/detach             leave (Ctrl-C, Ctrl-D too); the stage goes on");
    t.type("/answer q1");
    t.keys("Enter");
    await t.waitFor("/answer needs a question id and a text: /answer ID TEXT");
    t.type("/bogus now");
    t.keys("Enter");
    await t.waitFor("unknown command /bogus; /help lists them");
    t.type("/detach");
    t.keys("Enter");
    expect(await t.exited()).toBe(0);
    // Ctrl-D and Ctrl-C leave the same way.
    for (const key of ["C-d", "C-c"]) {
      const again = Tmux.atomic(["attach", run.runId, "chat"], { home, env, cols: 120, rows: 40 });
      await again.waitFor("attached to chat");
      again.keys(key);
      expect(await again.exited()).toBe(0);
      again.kill();
    }
    // Nothing was sent to the stage, which goes on and completes once its call is answered.
    const inbox = JSON.parse((await runAtomic(["inbox", run.runId, "--json"], { home, env })).stdout) as { stages: { messages: unknown[] }[] };
    expect(inbox.stages.flatMap((st) => st.messages)).toEqual([]);
    gate.resolve();
    expect(await run.proc.exited).toBe(0);
    expect(fake.requests.length).toBe(1);
  } finally {
    tmux?.kill();
    await fake.close();
  }
});

e2eTest("attach shows an agent's ask_user question with its id; /answer typed in attach answers it and the answer is the call's result", async () => {
  // Asks once; given the answer (the ask_user call's result), says it.
  const fake = await startFakeOpenAI((req) => {
    const answer = req.body.messages.find((m) => m.role === "tool" && m.tool_call_id === "call_ask");
    if (answer) return { text: `deploying: the answer was ${answer.content}` };
    return { toolCalls: [{ id: "call_ask", name: "ask_user", arguments: { question: "Deploy to production?", choices: ["yes", "no"] } }] };
  });
  const home = makeTempDir("atomic-attach-answer-");
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
  let tmux: Tmux | undefined;
  try {
    // Off a terminal, with no service: the run waits on the question, answerable from anywhere.
    const run = spawnAtomic(["run", ASK_USER, "--workers", "1"], { home, env, cwd: makeTempDir("atomic-live-cwd-") });
    const out = lineWatcher(run.stdout);
    const runId = /started run (\S+)/.exec(await out.waitFor(/started run \S+/))![1]!;
    const id = /question (\S+): Deploy to production\?/.exec(await out.waitFor(/question \S+: Deploy to production\?/))![1]!;
    const t = Tmux.atomic(["attach", runId, "deploy"], { home, env, cols: 140, rows: 40 });
    tmux = t;
    await t.waitFor("attached to deploy");
    await t.waitFor(`question ${id}: Deploy to production? (yes / no); answer with /answer ${id} TEXT`);
    t.type(`/answer ${id} yes`);
    t.keys("Enter");
    await t.waitFor(new RegExp(`→ answer to ${id}: yes \\[answered`));
    await t.waitFor("deploying: the answer was yes");
    await t.waitFor("the stage ended: completed");
    expect(await t.exited()).toBe(0);
    expect(await run.exited).toBe(0);
    // The answer reached the model as the ask_user call's result, in the same conversation.
    expect(fake.requests.length).toBe(2);
    expect(fake.requests[1]!.body.messages.at(-1)).toMatchObject({ role: "tool", tool_call_id: "call_ask", content: "yes" });
    // Recorded as answered from attach.
    const inbox = JSON.parse((await runAtomic(["inbox", runId, "--json"], { home, env })).stdout) as { prompts: { id: string; answer: string; answeredBy: string }[] };
    expect(inbox.prompts.find((p) => p.id === id)).toMatchObject({ answer: "yes", answeredBy: "attach" });
  } finally {
    tmux?.kill();
    await fake.close();
  }
});

e2eTest("watchers attaching while a pool worker's stage streams fast see its whole text once, in order: the transcript so far, then live", async () => {
  await watchersSeeEveryWordOnce(async (env) => {
    const home = makeTempDir("atomic-attach-join-");
    return { run: await startChat(home, env, ["--workers", "1"]), watcherHome: home };
  });
});
