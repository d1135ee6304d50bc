/**
 * Messages and questions through the real binary, as a user drives them:
 * `atomic send`, `inbox`, `sessions`, `answer`, with --json; bad input as
 * one sentence and a hint (exit 2); and crashes of real processes: the root
 * killed with SIGKILL while a message waits for a stage that has not
 * started (delivered exactly once after resume), the broker killed while
 * messages are queued (the next client starts a new one; the messages
 * arrive when their stages start), a question answered from another
 * process, answered while the root is dead, and a Ctrl-C while waiting;
 * malformed request bodies sent straight to a driver's sessions through a
 * real broker are refused (bad_request) and logged, never acted on, and the
 * driver goes on.
 *
 * Each test has its own ATOMIC_HOME; afterEach kills what it started
 * (runs and brokers) and removes the homes. No duration is asserted.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { expectOneSentenceError, parseNdjson, startedRunId } from "../e2e/support.ts";
import { alive, brokerPidOf, cleanupHomes, newHome, signal } from "./support.ts";
import { IntercomClient } from "../../src/intercom/client.ts";
import { inOrder, startFakeOpenAI, text } from "../helpers/fake-openai.ts";
import { openJournal } from "../../src/journal/open.ts";
import { notifyDriver, sendMessage } from "../../src/engine/messaging.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { journalOf } from "../helpers/postgres.ts";

const FIXTURES = join(import.meta.dir, "fixtures");
const MAIL = join(FIXTURES, "mail.ts");
const MAIL_COMPUTED = join(FIXTURES, "mail-computed.ts");
const ASKS = join(FIXTURES, "asks.ts");
const ASKS_WHY = join(FIXTURES, "asks-why.ts");

const clients: IntercomClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await killSpawned();
  await cleanupHomes();
});

interface Ctx {
  home: string;
  env: Record<string, string>;
  gate: string;
  out: string;
}

function setup(): Ctx {
  const home = newHome();
  const out = join(home, "out");
  Bun.spawnSync(["mkdir", "-p", out]);
  const gate = join(home, "gate");
  return { home, out, gate, env: { GATE_FILE: gate, OUT_DIR: out, ATOMIC_INTERCOM_IDLE_MS: "3000" } };
}

const cli = (c: Ctx, args: string[]) => runAtomic(args, { home: c.home, env: c.env });

/** Starts a workflow and waits for its run id and for `stage` to have started. */
async function start(c: Ctx, file: string, waitFor: RegExp, extra: string[] = []) {
  const proc = spawnAtomic(["run", file, "--in-process", ...extra], { home: c.home, env: c.env });
  const out = lineWatcher(proc.stdout);
  const id = startedRunId(await out.waitFor(/^started run /));
  await out.waitFor(waitFor);
  return { proc, out, id };
}

function readerLines(c: Ctx): string[] {
  const file = join(c.out, "reader.txt");
  return existsSync(file) ? readFileSync(file, "utf8").trim().split("\n") : [];
}

async function statusOf(c: Ctx, id: string): Promise<string> {
  const r = await cli(c, ["runs", "--json"]);
  return String(parseNdjson(r.stdout).find((x) => x.id === id)?.status);
}

describe("atomic send, inbox, sessions", () => {
  test("a message to a stage that has not started: queued, listed, delivered on its stdin when it starts", async () => {
    const c = setup();
    const { proc, out, id } = await start(c, MAIL, /stage gate started/);
    const sent = await cli(c, ["send", id, "reader", "hello there", "--json"]);
    expect(sent.code).toBe(0);
    const receipt = JSON.parse(sent.stdout) as { messageId: string; deliveries: unknown[] };
    expect(receipt.deliveries).toEqual([{ stage: "reader", state: "queued", started: false }]);
    const human = await cli(c, ["send", id, "reader", "second line"]);
    expect(human.stdout).toContain("queued (the stage has not started");
    const box = JSON.parse((await cli(c, ["inbox", id, "--json"])).stdout) as { stages: { stage: string; messages: { id: string; state: string }[] }[] };
    expect(box.stages).toMatchObject([{ stage: "reader", messages: [{ id: receipt.messageId, state: "queued" }, { state: "queued" }] }]);
    // `sessions` starts the broker; the live run joins it.
    await waitUntil(async () => {
      const r = await cli(c, ["sessions", "--run", id, "--json"]);
      return r.code === 0 && parseNdjson(r.stdout).some((x) => x.name === id);
    }, 20_000, "the run to join the broker");
    writeFileSync(c.gate, "");
    expect(await proc.exited).toBe(0);
    await out.waitFor(/"heard": "got:hello there"/);
    expect(readerLines(c)).toEqual(["hello there"]);
    const after = await cli(c, ["inbox", id]);
    expect(after.stdout).toMatch(/receipt-unverified\s+msg_\S+ .*hello there .*a shell stage's stdin: nothing confirms the command read it/);
  });

  test("delivery states: an openai stage's message is received (the model saw it); a retried stage's is session-replaced", async () => {
    const c = setup();
    const server = await startFakeOpenAI(inOrder(text("done")));
    try {
      const env = { ...c.env, ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
      const proc = spawnAtomic(["run", join(FIXTURES, "delivery-states.ts"), "--workers", "2"], { home: c.home, env });
      const out = lineWatcher(proc.stdout);
      const id = startedRunId(await out.waitFor(/^started run /));
      await out.waitFor(/stage gate started/);
      for (const [stage, text] of [["agent", "hello agent"], ["flaky", "hello flaky"]] as const) {
        expect((await runAtomic(["send", id, stage, text], { home: c.home, env })).code).toBe(0);
      }
      writeFileSync(c.gate, "");
      expect(await proc.exited).toBe(0);
      // the model's one request carried the message
      expect(JSON.stringify(server.requests[0]!.body)).toContain("hello agent");
      const box = JSON.parse((await runAtomic(["inbox", id, "--json"], { home: c.home, env })).stdout) as { stages: { stage: string; messages: { text: string; state: string; attempt: number; reason: string | null }[] }[] };
      const byStage = Object.fromEntries(box.stages.map((s) => [s.stage, s.messages.map((m) => ({ text: m.text, state: m.state, attempt: m.attempt, reason: m.reason }))]));
      expect(byStage).toEqual({
        agent: [{ text: "hello agent", state: "received", attempt: 1, reason: null }],
        flaky: [{ text: "hello flaky", state: "session-replaced", attempt: 1, reason: "the session of attempt 1 was replaced by attempt 2, which was given the message again" }],
      });
      const listed = await runAtomic(["inbox", id], { home: c.home, env });
      expect(listed.stdout).toMatch(/received\s+msg_\S+ .*hello agent/);
      expect(listed.stdout).toMatch(/session-replaced\s+msg_\S+ .*hello flaky .*attempt 2, which was given the message again/);
    } finally {
      await server.close();
    }
  });

  test("a stage name no path of the workflow can reach is refused with close matches, nothing recorded; a provable future stage is accepted silently", async () => {
    const c = setup();
    const { proc, id } = await start(c, MAIL, /stage gate started/);
    const typo = await cli(c, ["send", id, "gaet", "x"]);
    expect(typo.code).toBe(2);
    expect(expectOneSentenceError(typo.stderr)).toMatchObject({
      message: expect.stringMatching(/^run \S+ has no stage gaet: no stage of its workflow is named gaet/),
      hint: "did you mean: gate",
    });
    // a nested path is judged by its last segment
    expect(expectOneSentenceError((await cli(c, ["send", id, "sub/raeder", "x"])).stderr).hint).toBe("did you mean: reader");
    // nothing was recorded
    const inbox = await cli(c, ["inbox", id, "--json"]);
    expect(inbox.stdout).not.toContain("gaet");
    expect(inbox.stdout).not.toContain("raeder");
    // a stage the code names that has not started yet: queued, no warning
    const reader = await cli(c, ["send", id, "reader", "hello"]);
    expect(reader.code).toBe(0);
    expect(reader.stderr).toBe("");
    expect(reader.stdout).toMatch(/reader\s+queued \(the stage has not started/);
    // a stage that has started: no warning
    expect((await cli(c, ["send", id, "gate", "hi"])).stderr).toBe("");
    writeFileSync(c.gate, "");
    expect(await proc.exited).toBe(0);
    // the run can start no stage any more: refused, nothing queued
    const late = await cli(c, ["send", id, "gaet", "z"]);
    expect(late.code).toBe(2);
    expect(expectOneSentenceError(late.stderr)).toMatchObject({ message: expect.stringContaining("has no stage gaet"), hint: expect.stringContaining("gate") });
  });

  test("a workflow that builds stage names at run time: an unknown name is accepted with a warning (close matches of the started stages)", async () => {
    const c = setup();
    const { proc, id } = await start(c, MAIL_COMPUTED, /stage gate started/);
    const sent = await cli(c, ["send", id, "lint-src", "x", "--json"]);
    expect(sent.code).toBe(0);
    const receipt = JSON.parse(sent.stdout) as { warning?: string; deliveries: unknown[] };
    expect(receipt.deliveries).toEqual([{ stage: "lint-src", state: "queued", started: false }]);
    expect(receipt.warning).toMatch(/^the workflow of run \S+ builds stage names at run time, and none of those it spells out is lint-src; the message waits/);
    const human = await cli(c, ["send", id, "lint-lib", "y"]);
    expect(human.code).toBe(0);
    expect(human.stderr).toMatch(/^warning: the workflow of run \S+ builds stage names at run time/);
    writeFileSync(c.gate, "");
    expect(await proc.exited).toBe(0);
  });

  test("sessions is right on its first call, which starts the broker: the live run and its running stage, with their roles", async () => {
    const c = setup();
    const { proc, id } = await start(c, MAIL, /stage gate started/);
    expect(brokerPidOf(c.home)).toBeUndefined();
    const first = await cli(c, ["sessions", "--run", id, "--json"]);
    expect(first.code).toBe(0);
    const listed = parseNdjson(first.stdout).map((x) => [x.name, x.role]);
    expect(listed).toEqual([
      [id, "root"],
      [`${id}:gate`, "stage"],
    ]);
    const table = await cli(c, ["sessions"]);
    expect(table.stdout).toMatch(new RegExp(`^${id}:gate\\s+stage\\s+\\d+`, "m"));
    expect((await cli(c, ["send", id, "reader", "for the reader"])).code).toBe(0); // it reads one line
    writeFileSync(c.gate, "");
    expect(await proc.exited).toBe(0);
  });

  test("bad input is one sentence and a hint, exit 2, nothing recorded", async () => {
    const c = setup();
    const { proc, id } = await start(c, MAIL, /stage gate started/);
    const cases: [string[], RegExp][] = [
      [["send", "zzzzzz", "reader", "x"], /no run with id zzzzzz/],
      [["send", id, "reader", "  "], /message text is empty/],
      [["send", id, "reader", "x", "--mode", "shout"], /delivery mode must be one of steer, followUp, interrupt/],
      [["send", id, "gate/inner", "x"], /gate is a stage, not a child workflow/],
      [["send", id, "ga*x", "x"], /no started stage of run .* matches ga\*x/],
      [["send", id, "a//b", "x"], /empty name/],
      [["send", id, "reader"], /.+/],
      [["answer", id, "q-none", "yes"], /has no question "q-none"/],
    ];
    for (const [args, message] of cases) {
      const r = await cli(c, args);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(expectOneSentenceError(r.stderr).message).toMatch(message);
    }
    expect((await cli(c, ["send", id, "reader", "one", "--id", "mine"])).code).toBe(0);
    expect((await cli(c, ["send", id, "reader", "one", "--id", "mine"])).stdout).toContain("sent before; nothing new");
    const reused = await cli(c, ["send", id, "reader", "two", "--id", "mine"]);
    expect(reused.code).toBe(2);
    expect(expectOneSentenceError(reused.stderr).message).toContain("message id mine was already used");
    // The queue filled to its limit in this process, through the engine function `atomic send` calls (49
    // binary starts would be the send tested above, again); the 51st goes through the binary and is refused.
    const journal = await openJournal({ home: c.home, durability: "full", ...journalOf(c.home) });
    try {
      const run = (await journal.getRun(id as RunId))!;
      for (let i = 1; i < 50; i++) expect((await sendMessage(journal, { run, target: "reader", text: `m${i}`, sender: "cli" })).deliveries[0]!.state).toBe("queued");
    } finally {
      await journal.close();
    }
    const full = await cli(c, ["send", id, "reader", "the 51st"]);
    expect(full.code).toBe(2);
    const err = expectOneSentenceError(full.stderr);
    expect(err.message).toContain("already has 50 queued messages; the limit is 50 per stage");
    expect(err.hint).toContain(`atomic inbox ${id}`);
    writeFileSync(c.gate, "");
    expect(await proc.exited).toBe(0);
    // The run completed: a path it never had is refused, naming the close match.
    const typo = await cli(c, ["send", id, "raeder", "x"]);
    expect(typo.code).toBe(2);
    expect(expectOneSentenceError(typo.stderr)).toMatchObject({ message: expect.stringContaining("has no stage raeder"), hint: expect.stringContaining("reader") });
  });
});

describe("crashes", () => {
  test("the root killed with SIGKILL while a message waits for a stage that has not started: after resume it is delivered exactly once", async () => {
    const c = setup();
    const { proc, id } = await start(c, MAIL, /stage gate started/);
    expect((await cli(c, ["send", id, "reader", "survives"])).code).toBe(0);
    proc.kill("SIGKILL");
    await proc.exited;
    writeFileSync(c.gate, "");
    const resumed = await runAtomic(["resume", id, "--in-process"], { home: c.home, env: c.env });
    expect(resumed.code).toBe(0);
    expect(resumed.stdout).toContain('"heard": "got:survives"');
    expect(readerLines(c)).toEqual(["survives"]);
    const box = JSON.parse((await cli(c, ["inbox", id, "--json"])).stdout) as { stages: { messages: { state: string }[] }[] };
    expect(box.stages[0]!.messages.map((m) => m.state)).toEqual(["receipt-unverified"]);
  });

  test("the broker killed with SIGKILL while messages are queued: the next client starts a new one; the messages arrive when their stages start", async () => {
    const c = setup();
    const { proc, id } = await start(c, MAIL, /stage gate started/);
    expect((await cli(c, ["send", id, "reader", "kept in the journal"])).code).toBe(0);
    const listed = async () => {
      const r = await cli(c, ["sessions", "--run", id, "--json"]);
      return r.code === 0 && parseNdjson(r.stdout).some((x) => x.name === id);
    };
    await waitUntil(listed, 20_000, "the run to join the first broker");
    const first = brokerPidOf(c.home)!;
    signal(first, "SIGKILL");
    await waitUntil(() => !alive(first), 10_000, "the broker to die");
    await waitUntil(listed, 40_000, "the run to join a new broker");
    const second = brokerPidOf(c.home)!;
    expect(second).not.toBe(first);
    writeFileSync(c.gate, "");
    expect(await proc.exited).toBe(0);
    expect(readerLines(c)).toEqual(["kept in the journal"]);
  }, 90_000);
});

/** A client of the home's broker (starting it), once the run `id` has joined it. */
async function brokerClient(c: Ctx, id: string): Promise<IntercomClient> {
  const client = await IntercomClient.connect({ home: c.home, role: "test" });
  clients.push(client);
  await waitUntil(async () => (await client.list()).some((x) => x.name === id), 20_000, "the run to join the broker");
  return client;
}

describe("malformed requests to a driver", () => {
  const refused = { ok: false, error: { code: "bad_request" } };

  test("to the run's session: refused (bad_request) and logged, the question stays open; a well-formed answer then goes through", async () => {
    const c = setup();
    const { proc, out, id } = await start(c, ASKS_WHY, /question q\w+: why\?/);
    const qid = /question (q\w+)/.exec(out.text())![1]!;
    const client = await brokerClient(c, id);
    const bad: unknown[] = [
      { type: "answer", promptId: qid, answer: { text: "not a string" } },
      { type: "answer", promptId: qid },
      { type: "answer", promptId: 7, answer: "x" },
      { type: "bogus" },
      42,
      null,
      ["mail"],
    ];
    for (const body of bad) expect((await client.ask(id, body, 30_000)).reply).toMatchObject(refused);
    // Not asked (no reply expected): ignored all the same.
    await client.send(id, { type: "answer", promptId: qid, answer: 5 });
    expect(await statusOf(c, id)).toBe("awaiting_input");
    const box = JSON.parse((await cli(c, ["inbox", id, "--json"])).stdout) as { prompts: { id: string; state: string; answer: string | null }[] };
    expect(box.prompts).toMatchObject([{ id: qid, state: "open", answer: null }]);
    expect((await client.ask(id, { type: "answer", promptId: qid, answer: "because" }, 30_000)).reply).toEqual({ ok: true, status: "answered" });
    expect(await proc.exited).toBe(0);
    await out.waitFor(/"answer": "because"/);
    const stderr = await new Response(proc.stderr).text();
    expect(stderr).toContain(`warning: ignored a malformed intercom request from `);
    expect(stderr).toMatch(new RegExp(`to ${id}: at answer: Invalid type: Expected string but received Object`));
  });

  test("to a running stage's session: a bad mode or a text that is not a string is refused and records nothing", async () => {
    const c = setup();
    const { proc, id } = await start(c, MAIL, /stage gate started/);
    const client = await brokerClient(c, id);
    await waitUntil(async () => (await client.list()).some((x) => x.name === `${id}:gate`), 20_000, "the stage's session");
    for (const body of [{ text: "hi", mode: "sideways" }, { text: 5 }, { mode: "steer" }, 3]) {
      expect((await client.ask(`${id}:gate`, body, 30_000)).reply).toMatchObject(refused);
    }
    const box = JSON.parse((await cli(c, ["inbox", id, "--json"])).stdout) as { stages: unknown[] };
    expect(box.stages).toEqual([]);
    const ok = (await client.ask(`${id}:gate`, { text: "hello", mode: "followUp" }, 30_000)).reply as { ok: boolean; messageId: string };
    expect(ok).toMatchObject({ ok: true, messageId: expect.stringMatching(/^msg_/) });
    expect((await cli(c, ["send", id, "reader", "line"])).code).toBe(0); // the next stage reads one line
    writeFileSync(c.gate, "");
    expect(await proc.exited).toBe(0);
  });
});

describe("questions", () => {
  test("ctx.ask answered from another process: the run shows awaiting_input, then goes on", async () => {
    const c = setup();
    const { proc, out, id } = await start(c, ASKS, /question q\w+: ship it\? \[yes\/no\]/);
    const qid = /question (q\w+)/.exec(out.text())![1]!;
    expect(out.text()).toContain(`answer with: atomic answer ${id} ${qid} <answer>`);
    expect(await statusOf(c, id)).toBe("awaiting_input");
    const show = await cli(c, ["show", id]);
    expect(show.stdout).toMatch(/^status\s+awaiting_input$/m);
    expect(show.stdout).toContain(`${qid}: ship it? [yes/no]`);
    const bad = await cli(c, ["answer", id, qid, "maybe"]);
    expect(bad.code).toBe(2);
    expect(expectOneSentenceError(bad.stderr).message).toContain('must be one of "yes", "no"');
    const ok = await cli(c, ["answer", id, qid, "yes", "--json"]);
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ runId: id, question: qid, status: "answered", answer: "yes", driven: true });
    expect(await proc.exited).toBe(0);
    await out.waitFor(/"answer": "yes"/);
  });

  test("answered while the root is dead (SIGKILL), then resumed: it goes on without asking again", async () => {
    const c = setup();
    const { proc, out, id } = await start(c, ASKS, /question q\w+/);
    const qid = /question (q\w+)/.exec(out.text())![1]!;
    proc.kill("SIGKILL");
    await proc.exited;
    expect(await statusOf(c, id)).toBe("crashed");
    const answered = await cli(c, ["answer", id, qid, "no"]);
    expect(answered.code).toBe(0);
    expect(answered.stdout).toContain(`no process drives the run; continue it with: atomic resume ${id}`);
    const resumed = await runAtomic(["resume", id, "--in-process"], { home: c.home, env: c.env });
    expect(resumed.code).toBe(0);
    expect(resumed.stdout).toContain('"answer": "no"');
    expect(resumed.stdout).not.toMatch(/question q\w+: ship it/);
    expect(readFileSync(join(c.out, "side.txt"), "utf8")).toBe("before\nafter\n");
  });

  test("Ctrl-C while a question waits: exit 130, the run is parked awaiting_input; a resume waits again for the same question", async () => {
    const c = setup();
    const { proc, out, id } = await start(c, ASKS, /question q\w+/);
    const qid = /question (q\w+)/.exec(out.text())![1]!;
    proc.kill("SIGINT");
    expect(await proc.exited).toBe(130);
    expect(await statusOf(c, id)).toBe("awaiting_input");
    const again = spawnAtomic(["resume", id, "--in-process"], { home: c.home, env: c.env });
    const seen = lineWatcher(again.stdout);
    await seen.waitFor(new RegExp(`question ${qid}: ship it\\?`));
    expect((await cli(c, ["answer", id, qid, "yes"])).code).toBe(0);
    expect(await again.exited).toBe(0);
    await seen.waitFor(/"answer": "yes"/);
  });
});

describe("pause and cancel tell the driver", () => {
  test("a driver on the broker applies a control request when asked and answers once it is applied; pause, unpause and cancel use it", async () => {
    const c = setup();
    const { proc, id } = await start(c, MAIL, /stage gate started/);
    // `sessions` starts the broker and answers once the live run has joined it.
    expect(parseNdjson((await cli(c, ["sessions", "--run", id, "--json"])).stdout).some((x) => x.name === id)).toBe(true);
    const journal = await openJournal({ home: c.home, durability: "full", ...journalOf(c.home) });
    try {
      const rev = await journal.requestControl(id as RunId, "pause");
      expect(await notifyDriver(c.home, id as RunId, { type: "control" }, 10_000, false)).toEqual({ ok: true, applied: rev });
      // Answered after it was applied: the acknowledgement is in the journal already.
      expect((await journal.getRun(id as RunId))!.controlAck).toBe(rev);
    } finally {
      await journal.close();
    }
    expect(await statusOf(c, id)).toBe("paused");
    expect(JSON.parse((await cli(c, ["unpause", id, "--json"])).stdout)).toEqual({ runId: id, control: "unpause", acknowledged: true });
    expect(JSON.parse((await cli(c, ["pause", id, "reader", "--json"])).stdout)).toEqual({ runId: id, stage: "reader", control: "pause", acknowledged: true });
    expect(JSON.parse((await cli(c, ["cancel", id, "--json"])).stdout)).toEqual({ runId: id, result: "cancelled", status: "cancelled" });
    expect(await proc.exited).toBe(4);
  });
});
