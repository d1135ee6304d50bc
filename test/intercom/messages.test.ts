/**
 * Messages to stages and questions to people, through the engine in this
 * process (real SQLite journal, or Postgres with ATOMIC_TEST_JOURNAL=postgres;
 * real shell stages; no broker needed: the driver polls the journal).
 * Messages sent before a stage starts are the
 * first thing on its stdin, exactly once even across a crash; live ones
 * arrive on stdin (interrupt: SIGINT first); sticky patterns reach stages
 * of child workflows that start later; refusals are clear and write
 * nothing; ctx.send is a step that never sends twice; ctx.ask parks the
 * run as awaiting_input, survives a stop and resumes still waiting.
 */

import { PoolExecutor } from "../../src/pool/pool-executor.ts";
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { answerPrompt, inbox, sendMessage, type SendResult } from "../../src/engine/messaging.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { AtomicError } from "../../src/shared/errors.ts";
import { workflow } from "../../src/sdk/index.ts";
import type { StageResult } from "../../src/sdk/types.ts";
import { engineAfterEach, shQuote, waitUntil, withEngine, type Engine } from "../engine/helpers.ts";
import { journalUrlForHome } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";

import { untilExists } from "../helpers/gate.ts";
afterEach(engineAfterEach);

/** Waits for the file `gate`, so a test can hold a run before its next stage. */
const gateCommand = (gate: string) => `${untilExists(shQuote(gate))}; echo open`;
/** Reads `n` lines from stdin and prints each as got:<line>. */
const reader = (n = 1) => Array.from({ length: n }, () => 'read -r l; echo "got:$l"').join("; ");

function gated(gate: string, then: (ctx: Parameters<Parameters<typeof workflow>[0]["run"]>[0]) => Promise<unknown>) {
  return workflow({
    name: "gated-mail",
    async run(ctx) {
      await ctx.shell("gate", gateCommand(gate));
      return then(ctx);
    },
  });
}

async function send(fx: Engine, runId: RunId, target: string, text: string, extra: { mode?: string; sticky?: boolean; id?: string } = {}): Promise<SendResult> {
  return sendMessage(fx.journal, { run: await fx.getRun(runId), target, text, sender: "test", ...extra });
}

async function expectCode(p: Promise<unknown>, code: string): Promise<AtomicError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(AtomicError);
    expect((err as AtomicError).code).toBe(code);
    return err as AtomicError;
  }
  throw new Error(`expected ${code}`);
}

function stageStarted(fx: Engine, name: string): Promise<void> {
  return waitUntil(() => fx.eventsOf("step_started").some((e) => e.name === name), `stage ${name} to start`).then(() => {});
}

describe("messages to stages", () => {
  test("a message sent before a stage starts is the first thing on its stdin, delivered once and journaled", async () => {
    await withEngine(async (fx) => {
      const gate = join(makeTempDir(), "gate");
      const driven = await fx.start(gated(gate, (ctx) => ctx.shell("reader", reader(1))));
      const running = driven.run();
      await stageStarted(fx, "gate");
      const sent = await send(fx, driven.runId, "reader", "hello before start");
      expect(sent.deliveries).toEqual([{ stage: "reader", state: "queued", started: false }]);
      writeFileSync(gate, "");
      const out = await running;
      expect(out.status).toBe("completed");
      expect((out.outputs as StageResult).text).toBe("got:hello before start\n");
      const box = await inbox(fx.journal, await fx.getRun(driven.runId));
      // a shell stage reads its stdin without a receipt: once it ended, the delivery is receipt-unverified
      const SHELL = "a shell stage's stdin: nothing confirms the command read it";
      expect(box.stages).toMatchObject([{ stage: "reader", messages: [{ id: sent.messageId, state: "receipt-unverified", attempt: 1, reason: SHELL }] }]);
      const events = (await fx.journalEvents(driven.runId)).filter((e) => e.type.startsWith("message"));
      expect(events).toMatchObject([{ type: "messages_delivered", payload: { stagePath: "reader", messageIds: [sent.messageId], beforeStart: true } }]);
      expect(fx.eventsOf("message")).toMatchObject([{ stage: "reader", state: "delivered", live: false }, { stage: "reader", state: "receipt-unverified", reason: SHELL }]);
    });
  });

  for (const where of ["in-process", "pool"] as const) test(`live delivery (${where}): steer and followUp arrive on stdin in order; interrupt sends SIGINT first`, async () => {
    await withEngine(async (fx) => {
      const wf = workflow({
        name: "live-mail",
        async run(ctx) {
          const a = await ctx.shell("talker", `echo ready; ${reader(2)}`);
          const b = await ctx.shell("worker", `trap 'read -r m; echo "interrupted:$m"; exit 0' INT; echo busy; while true; do sleep 0.2; done`);
          return { a: a.text, b: b.text };
        },
      });
      const pool = where === "pool" ? { executor: (lease: { rootId: string; epoch: number }) => new PoolExecutor({ home: fx.home, journalUrl: journalUrlForHome(fx.home), rootId: lease.rootId, rootEpoch: lease.epoch, workers: 2 }) } : {};
      const driven = await fx.start(wf, {}, pool);
      const running = driven.run();
      await waitUntil(() => fx.eventsOf("stage_output").some((e) => e.name === "talker" && e.text.includes("ready")), "talker to be ready");
      const one = await send(fx, driven.runId, "talker", "first");
      expect(one.deliveries).toEqual([{ stage: "talker", state: "queued", started: true }]);
      await send(fx, driven.runId, "talker", "second", { mode: "followUp" });
      await waitUntil(() => fx.eventsOf("stage_output").some((e) => e.name === "worker" && e.text.includes("busy")), "worker to be busy");
      await send(fx, driven.runId, "worker", "stop now", { mode: "interrupt" });
      const out = await running;
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual({ a: "ready\ngot:first\ngot:second\n", b: "busy\ninterrupted:stop now\n" });
      const live = (await fx.journalEvents(driven.runId)).filter((e) => e.type === "message_delivered");
      expect(live.map((e) => (e.payload as { stagePath: string; mode: string }).mode)).toEqual(["steer", "followUp", "interrupt"]);
    });
  });

  test("a sticky pattern reaches a stage inside a child workflow that starts later; a plain pattern needs a started stage", async () => {
    await withEngine(async (fx) => {
      const gate = join(makeTempDir(), "gate");
      const child = workflow({
        name: "review",
        async run(ctx) {
          const s = await ctx.shell("security", reader(1));
          const t = await ctx.shell("style", reader(1));
          return { s: s.text, t: t.text };
        },
      });
      const driven = await fx.start(gated(gate, (ctx) => ctx.workflow(child, {}, { name: "review" })));
      const running = driven.run();
      await stageStarted(fx, "gate");
      const err = await expectCode(send(fx, driven.runId, "review/*", "not yet"), "no_match");
      expect(err.hint).toBeDefined();
      const sticky = await send(fx, driven.runId, "review/*", "to every reviewer", { sticky: true });
      expect(sticky.deliveries).toEqual([]);
      expect(sticky.sticky).toBe(true);
      writeFileSync(gate, "");
      const out = await running;
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual({ s: "got:to every reviewer\n", t: "got:to every reviewer\n" });
      const box = await inbox(fx.journal, await fx.getRun(driven.runId));
      expect(box.stages.map((s) => [s.stage, s.messages.map((m) => m.state)])).toEqual([
        ["review/security", ["receipt-unverified"]],
        ["review/style", ["receipt-unverified"]],
      ]);
      expect(box.sticky).toMatchObject([{ target: "review/*" }]);
    });
  });

  test("a message queued before its stage started survives a crash of the root and is delivered exactly once after resume", async () => {
    await withEngine(async (fx) => {
      const gate = join(makeTempDir(), "gate");
      const wf = gated(gate, (ctx) => ctx.shell("reader", reader(1)));
      const first = await fx.start(wf);
      // Die in the window after the reader claimed its messages and before its start record: the worst moment.
      first.crashOn((e) => e.type === "step_started" && (e.payload as { name?: string }).name === "reader");
      const running = first.run();
      await stageStarted(fx, "gate");
      const sent = await send(fx, first.runId, "reader", "exactly once");
      writeFileSync(gate, "");
      await running;
      expect(first.crashed).toBe(true);
      expect((await fx.getRun(first.runId)).status).toBe("running");
      const resumed = await fx.resumeRun(first.runId, wf);
      expect(resumed.status).toBe("completed");
      expect((resumed.outputs as StageResult).text).toBe("got:exactly once\n");
      const box = await inbox(fx.journal, await fx.getRun(first.runId));
      expect(box.stages).toMatchObject([{ stage: "reader", messages: [{ id: sent.messageId, state: "receipt-unverified" }] }]);
      const claims = (await fx.journalEvents(first.runId)).filter((e) => e.type === "messages_delivered");
      expect(claims).toHaveLength(1);
    });
  });

  test("a message to a stage that never starts is undeliverable once the run completes; a finished stage refuses messages", async () => {
    await withEngine(async (fx) => {
      const gate = join(makeTempDir(), "gate");
      const driven = await fx.start(gated(gate, async () => "done"));
      const running = driven.run();
      await stageStarted(fx, "gate");
      const sent = await send(fx, driven.runId, "later", "never read");
      writeFileSync(gate, "");
      expect((await running).status).toBe("completed");
      const box = await inbox(fx.journal, await fx.getRun(driven.runId));
      expect(box.stages[0]!.messages[0]).toMatchObject({ id: sent.messageId, state: "undeliverable", reason: expect.stringContaining("completed") });
      await expectCode(send(fx, driven.runId, "gate", "too late"), "run_ended");
    });
  });

  test("refusals name the problem and write nothing: no such stage (close matches), no pattern match, the 51st queued message, empty text, a reused id", async () => {
    await withEngine(async (fx) => {
      const gate = join(makeTempDir(), "gate");
      const driven = await fx.start(gated(gate, (ctx) => ctx.shell("reader", reader(1))));
      const running = driven.run();
      await stageStarted(fx, "gate");
      const runId = driven.runId;
      const through = await expectCode(send(fx, runId, "gate/inner", "x"), "no_such_stage");
      expect(through.message).toContain("gate is a stage, not a child workflow");
      const pattern = await expectCode(send(fx, runId, "gat?x*", "x"), "no_match");
      expect(pattern.hint).toContain("gate");
      await expectCode(send(fx, runId, "reader", "   "), "empty_message");
      await expectCode(send(fx, runId, "reader", "x", { mode: "shout" }), "bad_mode");
      await send(fx, runId, "reader", "one", { id: "fixed-id" });
      expect((await send(fx, runId, "reader", "one", { id: "fixed-id" })).status).toBe("exists");
      await expectCode(send(fx, runId, "reader", "two", { id: "fixed-id" }), "message_id_conflict");
      for (let i = 1; i < 50; i++) await send(fx, runId, "reader", `m${i}`);
      const full = await expectCode(send(fx, runId, "reader", "the 51st"), "queue_full");
      expect(full.message).toContain("limit is 50");
      expect((await fx.journal.messages.messagesOf(runId)).messages).toHaveLength(50);
      writeFileSync(gate, "");
      expect((await running).status).toBe("completed");
      // The run ended: a path it never had is refused, naming the close match.
      const typo = await expectCode(send(fx, runId, "redaer", "x"), "no_such_stage");
      expect(typo.hint).toContain("reader");
    });
  });

  test("ctx.send: a step whose receipt is replayed; a resumed run does not send again", async () => {
    await withEngine(async (fx) => {
      const flag = join(makeTempDir(), "fail-once");
      writeFileSync(flag, "");
      const wf = workflow({
        name: "sender",
        async run(ctx) {
          const [listened, receipt] = await ctx.parallel([{ name: "listener", shell: reader(1) }, () => ctx.send("listener", "ping from code")]);
          await ctx.tool("after", {}, () => {
            if (existsSync(flag)) throw new Error("fails the first time");
            return true;
          }, { retries: 0 });
          return { heard: (listened as StageResult).text, receipt };
        },
      });
      const first = await fx.run(wf);
      expect(first.status).toBe("failed");
      const { messages } = await fx.journal.messages.messagesOf(first.runId);
      expect(messages).toHaveLength(1);
      expect(messages[0]!.sender).toBe(first.runId);
      const { rmSync } = await import("node:fs");
      rmSync(flag);
      const resumed = await fx.resumeRun(first.runId, wf);
      expect(resumed.status).toBe("completed");
      expect(resumed.outputs).toMatchObject({ heard: "got:ping from code\n", receipt: { messageId: messages[0]!.id, target: "listener" } });
      expect((await fx.journal.messages.messagesOf(first.runId)).messages).toHaveLength(1);
    });
  });
});

describe("ctx.ask", () => {
  const asking = (opts: { timeoutMs?: number } = {}) =>
    workflow({
      name: "asking",
      async run(ctx) {
        const answer = await ctx.ask("ship it?", { choices: ["yes", "no"], ...opts });
        return { answer };
      },
    });

  /** The question's id once it is open in the journal and the driver has said so (its event follows the commit, so the row can be seen first). */
  async function openQuestion(fx: Engine, runId: RunId): Promise<string> {
    const prompt = await waitUntil(async () => (await fx.journal.messages.prompts(runId, "open"))[0], "the question to open");
    await waitUntil(() => fx.eventsOf("prompt").some((e) => e.promptId === prompt.id), "the driver to report the open question");
    return prompt.id;
  }

  test("the run shows awaiting_input until an answer arrives; the answer is checkpointed; bad answers are refused", async () => {
    await withEngine(async (fx) => {
      const driven = await fx.start(asking());
      const running = driven.run();
      const id = await openQuestion(fx, driven.runId);
      expect((await fx.getRun(driven.runId)).status).toBe("awaiting_input");
      expect(fx.eventsOf("prompt")).toMatchObject([{ promptId: id, state: "open", question: "ship it?", choices: ["yes", "no"] }]);
      const run = await fx.getRun(driven.runId);
      await expectCode(answerPrompt(fx.journal, run, id, "maybe", "test"), "bad_answer");
      await expectCode(answerPrompt(fx.journal, run, "q-nope", "yes", "test"), "unknown_prompt");
      await expectCode(answerPrompt(fx.journal, run, id, "", "test"), "empty_answer");
      expect((await answerPrompt(fx.journal, run, id, "yes", "test")).status).toBe("answered");
      const out = await running;
      expect(out).toMatchObject({ status: "completed", outputs: { answer: "yes" } });
      const cp = (await fx.checkpoints(driven.runId)).find((e) => (e.payload as { kind: string }).kind === "ask");
      expect(cp!.payload).toMatchObject({ result: { promptId: id, answer: "yes", answeredBy: "test" } });
      const statuses = (await fx.journalEvents(driven.runId)).filter((e) => e.type === "status_changed").map((e) => (e.payload as { to: string }).to);
      expect(statuses).toEqual(["completed"]);
      expect((await fx.journal.getRun(driven.runId))!.status).toBe("completed");
    });
  });

  test("stopped while waiting: parked awaiting_input; answered while no process drives it; the resumed run goes on without asking again", async () => {
    await withEngine(async (fx) => {
      const wf = asking();
      const driven = await fx.start(wf);
      const running = driven.run();
      const id = await openQuestion(fx, driven.runId);
      driven.stop("interrupted");
      expect((await running).status).toBe("awaiting_input");
      expect((await fx.getRun(driven.runId)).status).toBe("awaiting_input");
      await answerPrompt(fx.journal, await fx.getRun(driven.runId), id, "no", "test");
      const resumed = await fx.resumeRun(driven.runId, wf);
      expect(resumed).toMatchObject({ status: "completed", outputs: { answer: "no" } });
      expect(await fx.journal.messages.prompts(driven.runId)).toHaveLength(1);
    });
  });

  test("resumed without an answer, the run waits again for the same question", async () => {
    await withEngine(async (fx) => {
      const wf = asking();
      const first = await fx.start(wf);
      const running = first.run();
      const id = await openQuestion(fx, first.runId);
      first.stop("interrupted");
      await running;
      const second = await fx.resume(first.runId, wf);
      const again = second.run();
      await waitUntil(async () => (await fx.getRun(first.runId)).status === "awaiting_input", "awaiting input again");
      expect((await fx.journal.messages.prompts(first.runId)).map((p) => [p.id, p.state])).toEqual([[id, "open"]]);
      await answerPrompt(fx.journal, await fx.getRun(first.runId), id, "yes", "test");
      expect(await again).toMatchObject({ status: "completed", outputs: { answer: "yes" } });
    });
  });

  test("a question in a child workflow parks the root too; a timeout fails the step and a resume asks anew", async () => {
    await withEngine(async (fx) => {
      const child = workflow({
        name: "approver",
        async run(ctx) {
          return ctx.ask("approve?", { timeoutMs: 300 });
        },
      });
      const wf = workflow({
        name: "parent",
        async run(ctx) {
          return ctx.workflow(child, {}, { name: "approval" });
        },
      });
      const driven = await fx.start(wf);
      const running = driven.run();
      const id = await openQuestion(fx, driven.runId);
      expect((await fx.getRun(driven.runId)).status).toBe("awaiting_input");
      const out = await running;
      expect(out.status).toBe("failed");
      expect(out.error?.code).toBe("ask_timeout");
      expect((await fx.journal.messages.getPrompt(driven.runId, id))!.state).toBe("timed_out");
      const resumed = await fx.resume(driven.runId, wf);
      const again = resumed.run();
      const second = await waitUntil(async () => (await fx.journal.messages.prompts(driven.runId, "open"))[0], "a new question");
      expect(second.id).not.toBe(id);
      await answerPrompt(fx.journal, await fx.getRun(driven.runId), second.id, "fine", "test");
      expect(await again).toMatchObject({ status: "completed", outputs: "fine" });
    });
  });
});
