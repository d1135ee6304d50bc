/**
 * The openai runner's ask_user tool (docs/guides/messages-and-humans.md):
 * the stage parks on the agent's question exactly like ctx.ask, durably.
 *
 * Through the real binary: a run's driver is SIGKILLed while the stage is
 * parked; `atomic inbox --json` lists the question with its choices;
 * `atomic answer` answers it while `atomic serve` runs; the service
 * continues the run and the answer reaches the model as the ask_user
 * call's result (the fake provider's request log), in the same
 * conversation, the prompt not sent again. With no person reachable (off
 * a terminal, no service), the run says how to answer; stopped, it is
 * parked awaiting_input and says how to answer and resume. In process: a malformed call is
 * refused to the model (which goes on), and an ungranted one is unknown.
 */

import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { startFakeOpenAI, text, type RecordedRequest, type Script } from "../helpers/fake-openai.ts";
import { closeStage, openStage, runStage, stageRequest, type OpenAIStage } from "../helpers/openai-stage.ts";
import { kill9, newSetup, runIdOf, serviceCleanup, spawnRunOf, startService, untilStatus } from "../service/support.ts";

serviceCleanup();
const FIXTURE = join(import.meta.dir, "fixtures", "ask-user.ts");
const usage = { prompt: 10, completion: 5 };

/** Asks (after a list call, before another that is dropped) until the conversation holds the ask_user call's answer. */
const asking: Script = (req) => {
  const answer = req.body.messages.find((m) => m.role === "tool" && m.tool_call_id === "call_ask");
  if (answer) return text(`deploying: the answer was ${answer.content}`);
  return {
    toolCalls: [
      { id: "call_list", name: "list", arguments: {} },
      { id: "call_ask", name: "ask_user", arguments: { question: "Deploy to production?", choices: ["yes", "no"] } },
      { id: "call_after", name: "list", arguments: {} },
    ],
    usage,
  };
};

test("ask_user parks the stage; kill -9 of the root; answered with atomic answer while the service runs: the answer is the call's result", async () => {
  const server = await startFakeOpenAI(asking);
  try {
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const s = newSetup();
    const service = startService(s, [], env);
    await service.log.waitFor(/"type":"service_active"/);
    const run = spawnRunOf(s, FIXTURE, env);
    const runId = await runIdOf(run.out);
    await run.out.waitFor(/Deploy to production\?/);
    await kill9(run.proc);

    const inbox = JSON.parse((await runAtomic(["--home", s.home, "--json", "inbox", runId], { home: s.home })).stdout);
    expect(inbox.prompts.map((p: { question: string; choices: string[]; state: string }) => [p.question, p.choices, p.state])).toEqual([["Deploy to production?", ["yes", "no"], "open"]]);
    const answered = await runAtomic(["--home", s.home, "answer", runId, inbox.prompts[0].id, "yes"], { home: s.home });
    expect(answered.code).toBe(0);

    const done = await untilStatus(s, runId, "completed");
    expect(done.run.outputs).toEqual({ text: "deploying: the answer was yes" });
    expect(service.events("drive_started").map((e) => e.reason)).toEqual(["answered"]);
    // Two model calls: the one that asked, and the one given the answer, in the same conversation.
    expect(server.requests.length).toBe(2);
    const second = server.requests[1]!.body.messages;
    expect(second.filter((m) => m.role === "user" && String(m.content).includes("deploy the service")).length).toBe(1);
    expect(shape(second.slice(-3))).toEqual([
      ["assistant", "call_list,call_ask"],
      ["tool", "call_list"],
      ["tool", "call_ask", "yes"],
    ]);
  } finally {
    await server.close();
  }
}, 120_000);

test("ask_user with no person reachable (no terminal, no service): the stage parks and says how to answer; answered, resume continues it", async () => {
  const server = await startFakeOpenAI(asking);
  try {
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const s = newSetup();
    // Off a terminal (pipes), with no service running: nobody can be asked in place.
    const run = spawnAtomic(["--home", s.home, "run", FIXTURE, "--id", "ask-nobody-1"], { home: s.home, env });
    const out = lineWatcher(run.stdout);
    const asked = await out.waitFor(/question (\S+): Deploy to production\? \[yes\/no\]/);
    const id = /question (\S+):/.exec(asked)![1]!;
    await out.waitFor(literal(`answer with: atomic answer ask-nobody-1 ${id} <answer>`));
    const shown = await runAtomic(["--home", s.home, "show", "ask-nobody-1"], { home: s.home });
    expect(shown.stdout).toMatch(/status\s+awaiting_input/);
    expect(shown.stdout).toMatch(literal(`${id}: Deploy to production? [yes/no]; answer with: atomic answer ask-nobody-1 ${id} <answer>`));
    // Stopped while it waits: the run is parked on the question and says how to answer it and go on.
    run.kill("SIGINT");
    const code = await run.exited;
    const said = (await new Response(run.stderr).text()).replace(/\s+/g, " ");
    expect(code).toBe(130); // Ctrl-C's status, whatever the run's
    expect(said).toContain("run ask-nobody-1 awaiting_input");
    expect(said).toContain("see its open questions with: atomic inbox ask-nobody-1");
    expect(said).toContain("answer with: atomic answer ask-nobody-1 <question id> <answer>, then resume with: atomic resume ask-nobody-1");
    expect(server.requests.length).toBe(1); // parked: no model call meanwhile
    const answered = await runAtomic(["--home", s.home, "answer", "ask-nobody-1", id, "no"], { home: s.home });
    expect(answered.code).toBe(0);
    const resumed = await runAtomic(["--home", s.home, "resume", "ask-nobody-1"], { home: s.home, env });
    expect(resumed.code).toBe(0);
    const done = JSON.parse((await runAtomic(["--home", s.home, "show", "ask-nobody-1", "--json"], { home: s.home })).stdout) as { run: { outputs: unknown } };
    expect(done.run.outputs).toEqual({ text: "deploying: the answer was no" });
    // The answer is the ask_user call's result, in the same conversation.
    expect(server.requests.length).toBe(2);
    expect(shape(server.requests[1]!.body.messages.slice(-1))).toEqual([["tool", "call_ask", "no"]]);
  } finally {
    await server.close();
  }
}, 120_000);

describe_inProcess();

function literal(text: string): RegExp {
  return new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
}

function shape(messages: RecordedRequest["body"]["messages"]) {
  return messages.map((m) =>
    m.role === "assistant" ? [m.role, (m.tool_calls ?? []).map((c) => c.id).join(",")] : m.tool_call_id === "call_ask" ? [m.role, m.tool_call_id, m.content] : [m.role, m.tool_call_id],
  );
}

/** Each in-process test opens its own stage (the service tests' cleanup removes temp dirs after every test). */
function inProcess(name: string, fn: (stage: OpenAIStage) => Promise<void>) {
  test(name, async () => {
    const stage = await openStage();
    try {
      await fn(stage);
    } finally {
      await closeStage(stage);
    }
  });
}

function describe_inProcess() {
  inProcess("in process: the attempt ends with askUser and its conversation; the next attempt continues it with the answer", async (stage) => {
    stage.server.setScript(asking);
    const first = stageRequest(stage, {}, { tools: ["ask_user", "list"] });
    const parked = await runStage(first).result;
    expect([parked.status, parked.error?.code, parked.askUser]).toEqual(["failed", "ask_user", { callId: "call_ask", question: "Deploy to production?", choices: ["yes", "no"] }]);
    const saved = JSON.parse(readFileSync(join(first.artifactDir, "conversation.json"), "utf8")) as RecordedRequest["body"]["messages"];
    expect(shape(saved.slice(-2))).toEqual([["assistant", "call_list,call_ask"], ["tool", "call_list"]]);
    // Its transcript reads as waiting for the person, not as a failure.
    const transcript = readFileSync(parked.transcriptPath!, "utf8");
    expect(transcript).toContain("waiting for a person's answer to: Deploy to production?");
    expect(transcript).not.toContain("failed");
    const next = await runStage(stageRequest(stage, { attempt: 2, continueFrom: { artifactDir: first.artifactDir, fork: false }, answer: { callId: "call_ask", text: "no" }, initialMessages: [{ id: "m1", text: "also: be quick" }] }, { tools: ["ask_user", "list"] })).result;
    expect([next.status, next.text]).toEqual(["completed", "deploying: the answer was no"]);
    // The messages sent while it was parked follow the answer.
    const last = stage.server.requests.at(-1)!.body.messages;
    expect(last.at(-1)!.role).toBe("user");
    expect(String(last.at(-1)!.content)).toContain("also: be quick");
  });

  inProcess("in process: a malformed ask_user call is refused to the model, which goes on; without the grant it is no tool", async (stage) => {
    const calls: string[] = [];
    stage.server.setScript((req, i) => {
      const last = req.body.messages.at(-1)!;
      if (last.role === "tool") calls.push(String(last.content));
      return i === 0 ? { toolCalls: [{ id: "c1", name: "ask_user", arguments: { question: "", choices: ["a", "a"] } }], usage } : text("went on");
    });
    const refused = await runStage(stageRequest(stage, {}, { tools: ["ask_user"] })).result;
    expect([refused.status, refused.text, refused.askUser]).toEqual(["completed", "went on", undefined]);
    stage.server.setScript((req, i) => {
      const last = req.body.messages.at(-1)!;
      if (last.role === "tool") calls.push(String(last.content));
      return i === 0 ? { toolCalls: [{ id: "c2", name: "ask_user", arguments: { question: "ok?" } }], usage } : text("went on");
    });
    const ungranted = await runStage(stageRequest(stage, {}, { tools: ["list"] })).result;
    expect([ungranted.status, ungranted.askUser]).toEqual(["completed", undefined]);
    expect(calls).toEqual(["error: ask_user needs a non-empty question", 'error: there is no tool named "ask_user"; available: list']);
  });
}
