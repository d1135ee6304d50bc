/**
 * The message store contract (MessageStore in src/journal/messages.ts) on
 * every backend: enqueue with dedup by id and the per-stage limit, claims
 * at stage start (exactly once, fenced by the lease, journaled in the same
 * transaction), sticky messages, settling, prompts (answer once; a timeout
 * that races an answer loses), and the schema migration that brought them
 * (version 3: the runs table rebuilt for the awaiting_input status without
 * losing a row). Real databases in temp directories; no timing asserted.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { LATEST_SCHEMA_VERSION } from "../../src/journal/sqlite/schema-version.ts";
import type { AppendEntry } from "../../src/journal/append.ts";
import type { StageIndexEntry, StageState } from "../../src/journal/stage-index.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { MAX_QUEUED_PER_STAGE, type MessagePlanner, type NewMessage } from "../../src/journal/messages.ts";
import { AtomicError, LeaseLostError } from "../../src/shared/errors.ts";
import { newRunId, type RunId } from "../../src/shared/ids.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, liveHolder, sqlite, sqliteAtVersion, startRoot } from "./backends.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

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

function message(rootId: RunId, id: string, target: string, extra: Partial<NewMessage> = {}): NewMessage {
  return { rootId, id, target, text: `text of ${id}`, mode: "steer", sticky: false, sender: "test", lookup: { paths: [target] }, ...extra };
}

const toPath = (path: string): MessagePlanner => () => [{ stagePath: path }];

function stageEvent(rootId: RunId, key: string) {
  return (fresh: { messageId: string }[]): AppendEntry => ({ runId: rootId, type: "messages_delivered", payload: { key, ids: fresh.map((m) => m.messageId) } });
}

for (const backend of BACKENDS) {
  describe(`${backend.name}: messages`, () => {
    async function journal(): Promise<Journal> {
      const j = await backend.open(makeTempDir("atomic-msg-"), "normal");
      open.push(j);
      return j;
    }

    test(`${backend.name}: a message for a future stage is claimed by the first attempt of that path, once, with its event in the same commit`, async () => {
      const j = await journal();
      const { rootId, lease } = await startRoot(j);
      expect(await j.messages.hasMail(rootId)).toBe(false);
      const r = await j.messages.enqueue(message(rootId, "m1", "build"), toPath("build"));
      expect(r.status).toBe("queued");
      expect(r.deliveries).toMatchObject([{ stagePath: "build", state: "queued", runId: null, stageKey: null }]);
      expect(await j.messages.hasMail(rootId)).toBe(true);
      const before = (await j.readEvents(rootId)).length;
      const stage = { runId: rootId, stageKey: "3", path: "build", name: "build", attempt: 1 };
      const mail = await j.messages.claimForStage(lease, stage, () => false, stageEvent(rootId, "3"));
      expect(mail).toMatchObject([{ messageId: "m1", text: "text of m1", fresh: true }]);
      const events = await j.readEvents(rootId);
      expect(events.length).toBe(before + 1);
      expect(events.at(-1)).toMatchObject({ type: "messages_delivered", payload: { ids: ["m1"] } });
      // A second stage of that path gets nothing; a fresh attempt of the same stage gets it again (not fresh), with no new event.
      expect(await j.messages.claimForStage(lease, { ...stage, stageKey: "4" }, () => false, stageEvent(rootId, "4"))).toEqual([]);
      const again = await j.messages.claimForStage(lease, { ...stage, attempt: 2 }, () => false, stageEvent(rootId, "3"));
      expect(again).toMatchObject([{ messageId: "m1", fresh: false }]);
      expect((await j.readEvents(rootId)).length).toBe(before + 1);
      const { deliveries } = await j.messages.messagesOf(rootId);
      // ... and the delivery to the first attempt's session is session-replaced (delivery-states.ts), naming both attempts.
      expect(deliveries).toMatchObject([
        { messageId: "m1", state: "session-replaced", runId: rootId, stageKey: "3", attempt: 1, reason: "the session of attempt 1 was replaced by attempt 2, which was given the message again" },
      ]);
      // Both attempts' stages are in the index, running (the claim records them).
      expect((await j.messages.stages(rootId)).map((s) => [s.key, s.path, s.state])).toEqual([
        ["3", "build", "running"],
        ["4", "build", "running"],
      ]);
    });

    test(`${backend.name}: delivery states past delivered: a receipt makes received, an attempt's end receipt-unverified, each only from delivered`, async () => {
      const j = await journal();
      const { rootId, lease } = await startRoot(j);
      await j.messages.enqueue(message(rootId, "seen", "build"), toPath("build"));
      await j.messages.enqueue(message(rootId, "unseen", "build"), toPath("build"));
      const stage = { runId: rootId, stageKey: "3", path: "build", name: "build", attempt: 1 };
      expect((await j.messages.claimForStage(lease, stage, () => false, stageEvent(rootId, "3"))).map((m) => m.messageId)).toEqual(["seen", "unseen"]);
      const at = { runId: rootId, stageKey: "3", attempt: 1 };
      // a receipt for another attempt changes nothing
      expect(await j.messages.confirm(lease, { ...at, attempt: 2 }, ["seen"])).toEqual([]);
      expect(await j.messages.confirm(lease, at, ["seen"])).toEqual(["seen"]);
      expect(await j.messages.confirm(lease, at, ["seen"])).toEqual([]);
      expect(await j.messages.endAttempt(lease, at, "the test runner cannot confirm that the model saw it")).toEqual(["unseen"]);
      // a late receipt does not undo the end; a second end changes nothing
      expect(await j.messages.confirm(lease, at, ["unseen"])).toEqual([]);
      expect(await j.messages.endAttempt(lease, at, "again")).toEqual([]);
      const { deliveries } = await j.messages.messagesOf(rootId);
      expect(deliveries.map((d) => [d.messageId, d.state, d.reason])).toEqual([
        ["seen", "received", null],
        ["unseen", "receipt-unverified", "the test runner cannot confirm that the model saw it"],
      ]);
      // a retry replaces both sessions and is handed both again
      const retry = await j.messages.claimForStage(lease, { ...stage, attempt: 2 }, () => false, stageEvent(rootId, "3"));
      expect(retry.map((m) => [m.messageId, m.fresh])).toEqual([["seen", false], ["unseen", false]]);
      expect((await j.messages.messagesOf(rootId)).deliveries.map((d) => d.state)).toEqual(["session-replaced", "session-replaced"]);
    });

    test(`${backend.name}: dedup by message id; the same id with other content is refused; nothing is written for a refusal`, async () => {
      const j = await journal();
      const { rootId } = await startRoot(j);
      await j.messages.enqueue(message(rootId, "same", "a"), toPath("a"));
      const again = await j.messages.enqueue(message(rootId, "same", "a"), toPath("a"));
      expect(again.status).toBe("exists");
      expect(again.deliveries).toHaveLength(1);
      await expectCode(j.messages.enqueue(message(rootId, "same", "a", { text: "other" }), toPath("a")), "message_id_conflict");
      await expectCode(
        j.messages.enqueue(message(rootId, "refused", "a"), () => {
          throw new AtomicError("no_such_stage", "no", "usage");
        }),
        "no_such_stage",
      );
      expect((await j.messages.messagesOf(rootId)).messages.map((m) => m.id)).toEqual(["same"]);
    });

    test(`${backend.name}: at most ${MAX_QUEUED_PER_STAGE} queued messages per stage; delivered ones free their place`, async () => {
      const j = await journal();
      const { rootId, lease } = await startRoot(j);
      for (let i = 0; i < MAX_QUEUED_PER_STAGE; i++) await j.messages.enqueue(message(rootId, `m${i}`, "busy"), toPath("busy"));
      const err = await expectCode(j.messages.enqueue(message(rootId, "m50", "busy"), toPath("busy")), "queue_full");
      expect(err.message).toContain(`limit is ${MAX_QUEUED_PER_STAGE}`);
      await j.messages.enqueue(message(rootId, "other", "quiet"), toPath("quiet"));
      await j.messages.claimForStage(lease, { runId: rootId, stageKey: "0", path: "busy", name: "busy", attempt: 1 }, () => false, stageEvent(rootId, "0"));
      expect((await j.messages.enqueue(message(rootId, "m50", "busy"), toPath("busy"))).status).toBe("queued");
    });

    test(`${backend.name}: claims and settles are fenced: a driver that lost its lease changes nothing`, async () => {
      const j = await journal();
      const { rootId, lease } = await startRoot(j);
      await j.messages.enqueue(message(rootId, "m", "s"), toPath("s"));
      await j.releaseLease(lease);
      const taker = await j.acquireLease(rootId, liveHolder("msg"), { timeoutMs: 60_000 });
      expect(taker.epoch).toBe(lease.epoch + 1);
      const stage = { runId: rootId, stageKey: "0", path: "s", name: "s", attempt: 1 };
      await expect(j.messages.claimForStage(lease, stage, () => false, stageEvent(rootId, "0"))).rejects.toBeInstanceOf(LeaseLostError);
      await expect(j.messages.settleAll(lease, rootId, "gone")).rejects.toBeInstanceOf(LeaseLostError);
      expect((await j.messages.messagesOf(rootId)).deliveries[0]!.state).toBe("queued");
      expect(await j.messages.claimForStage(taker, stage, () => false, stageEvent(rootId, "0"))).toHaveLength(1);
    });

    test(`${backend.name}: sticky messages reach every matching stage as it starts, once each; bound deliveries are settled one way only`, async () => {
      const j = await journal();
      const { rootId, lease } = await startRoot(j);
      await j.messages.enqueue(message(rootId, "st", "review/*", { sticky: true, lookup: { prefix: "review/" } }), () => []);
      const claim = (key: string, path: string) =>
        j.messages.claimForStage(lease, { runId: rootId, stageKey: key, path, name: path, attempt: 1 }, (p) => p === "review/*" && path.startsWith("review/"), stageEvent(rootId, key));
      expect(await claim("0", "review/a")).toMatchObject([{ messageId: "st", fresh: true }]);
      expect(await claim("1", "lint")).toEqual([]);
      expect(await claim("2", "review/b")).toMatchObject([{ messageId: "st", fresh: true }]);
      // A message bound to a running stage: delivered live once; a second settle changes nothing.
      const live = await j.messages.enqueue(message(rootId, "live", "review/a"), () => [{ stagePath: "review/a", runId: rootId, stageKey: "0" }]);
      expect(await j.messages.liveQueued(rootId)).toMatchObject([{ messageId: "live", stageKey: "0", text: "text of live" }]);
      const seq = live.deliveries[0]!.seq;
      const events = (changed: number[]) => changed.map((s) => ({ runId: rootId, type: "message_delivered", payload: { seq: s } }));
      expect(await j.messages.settle(lease, [{ seq, state: "delivered", attempt: 1 }], events)).toEqual([seq]);
      expect(await j.messages.settle(lease, [{ seq, state: "undeliverable", reason: "late" }], events)).toEqual([]);
      expect(await j.messages.liveQueued(rootId)).toEqual([]);
      // Queued leftovers of a run that ends: undeliverable, with the reason.
      await j.messages.enqueue(message(rootId, "never", "later/x"), toPath("later/x"));
      expect(await j.messages.settleAll(lease, rootId, "the run completed")).toBe(1);
      const never = (await j.messages.messagesOf(rootId)).deliveries.find((d) => d.messageId === "never");
      expect(never).toMatchObject({ state: "undeliverable", reason: "the run completed" });
    });

    test(`${backend.name}: a stage's index row only moves forward: a late progress record of a finished attempt leaves it finished (its usage still adds up); a new attempt moves it`, async () => {
      const j = await journal();
      const { rootId, lease } = await startRoot(j);
      const rec = (state: StageState, attempt: number, extra: Partial<StageIndexEntry> = {}): AppendEntry => ({
        runId: rootId,
        type: "test_stage_record",
        payload: {},
        stage: { key: "0", path: "g4", name: "g4", kind: "stage", state, attempt, ...extra },
      });
      const row = async () => (await j.messages.stages(rootId)).find((r) => r.key === "0")!;
      const usage = { inputTokens: 3, outputTokens: 2, cacheReadTokens: 0, cacheWriteTokens: 0, costMicroUsd: 5, turns: 1 };
      await j.append(lease, [rec("queued", 1), rec("running", 1), rec("finished", 1, { outcome: "completed", usage })]);
      // in a later commit, as a busy root's stage_running can come: the row stays finished; its usage adds up
      await j.append(lease, [rec("running", 1, { usage })]);
      expect(await row()).toMatchObject({ state: "finished", attempt: 1 });
      expect(await j.views.stageTallies([rootId])).toMatchObject([{ state: "finished", outcome: "completed", stages: 1, usage: { inputTokens: 6, costMicroUsd: 10, turns: 2 } }]);
      await j.append(lease, [rec("queued", 1)]);
      expect(await row()).toMatchObject({ state: "finished", attempt: 1 });
      // a failed attempt, then the next one: it moves again
      await j.append(lease, [rec("failed", 1), rec("queued", 2)]);
      expect(await row()).toMatchObject({ state: "queued", attempt: 2 });
      await j.append(lease, [rec("running", 2), rec("running", 1)]);
      expect(await row()).toMatchObject({ state: "running", attempt: 2 });
    });

    test(`${backend.name}: prompts: opened with the ask's start record, answered once, a timeout that races an answer loses`, async () => {
      const j = await journal();
      const { rootId, lease } = await startRoot(j);
      await j.append(lease, [
        { runId: rootId, type: "step_started", key: "0", payload: {}, prompt: { id: "q1", question: "ship?", choices: ["yes", "no"], deadline: null }, patch: { status: "awaiting_input" } },
        { runId: rootId, type: "step_started", key: "1", payload: {}, prompt: { id: "q2", question: "why?", choices: null, deadline: Date.now() } },
      ]);
      expect((await j.getRun(rootId))!.status).toBe("awaiting_input");
      expect((await j.messages.prompts(rootId, "open")).map((p) => p.id)).toEqual(["q1", "q2"]);
      expect(await j.messages.answerPrompt(rootId, "q1", "yes", "tester")).toMatchObject({ status: "answered", prompt: { state: "answered", answer: "yes", answeredBy: "tester" } });
      expect((await j.messages.answerPrompt(rootId, "q1", "yes", "other")).status).toBe("exists");
      await expectCode(j.messages.answerPrompt(rootId, "q1", "no", "x"), "already_answered");
      await expectCode(j.messages.answerPrompt(rootId, "nope", "x", "x"), "unknown_prompt");
      expect(await j.messages.timeOutPrompt(lease, rootId, "q1")).toMatchObject({ state: "answered", answer: "yes" });
      expect(await j.messages.timeOutPrompt(lease, rootId, "q2")).toMatchObject({ state: "timed_out" });
      await expectCode(j.messages.answerPrompt(rootId, "q2", "late", "x"), "prompt_closed");
    });
  });
}

describe("sqlite: schema version 3", () => {
  test("a version 2 journal migrates: every run and event kept, awaiting_input accepted, references intact", async () => {
    const dir = makeTempDir("atomic-mig-");
    const file = `${dir}/atomic.db`;
    const db = await sqliteAtVersion(dir, 2);
    const root = newRunId();
    const child = newRunId();
    db.run(
      `insert into runs (id, root_id, parent_id, depth, workflow_name, workflow_path, workflow_digest, inputs, status, created_at, updated_at, last_seq, control_ack)
       values (?, ?, null, 0, 'old', '/old.ts', 'd', '{}', 'interrupted', 1, 2, 2, 3), (?, ?, ?, 1, 'kid', '', '', '{}', 'completed', 1, 2, 1, 0)`,
      [root, root, child, root, root],
    );
    db.run("insert into events (run_id, seq, type, payload, at) values (?, 1, 'run_started', '{}', 1), (?, 2, 'checkpoint', '{\"n\":1}', 2), (?, 1, 'run_started', '{}', 1)", [root, root, child]);
    db.close();

    const j = await sqlite.open(dir);
    open.push(j);
    expect(sqlite.readSchemaVersion!(dir)).toBe(LATEST_SCHEMA_VERSION);
    const run = (await j.getRun(root))!;
    expect(run).toMatchObject({ status: "interrupted", workflowName: "old", lastSeq: 2, controlAck: 3, createdAt: 1 });
    expect((await j.getRun(child))!.parentId).toBe(root);
    expect((await j.readEvents(root)).map((e) => e.type)).toEqual(["run_started", "checkpoint"]);
    expect(await j.listRuns({ parentId: root, rootsOnly: false })).toHaveLength(1);
    const lease = await j.acquireLease(root, liveHolder("msg"), { timeoutMs: 60_000 });
    const [out] = await j.append(lease, [{ runId: root, type: "status_changed", payload: {}, patch: { status: "awaiting_input" } }]);
    expect(out!.status).toBe("appended");
    expect((await j.listRuns({ status: "awaiting_input" })).map((r) => r.id)).toEqual([root]);
    await j.close();
    open.pop();
    const raw = new Database(file, { readonly: true });
    try {
      expect(raw.query("pragma foreign_key_check").all()).toEqual([]);
      const ddl = raw.query<{ sql: string }, []>("select sql from sqlite_master where name = 'runs'").get()!.sql;
      expect(ddl).toContain("awaiting_input");
      const indexes = raw.query<{ name: string }, []>("select name from sqlite_master where type = 'index' and tbl_name = 'runs' and name not like 'sqlite_%' order by name").all();
      // (runs_by_change: schema version 5; runs_roots_by_origin and runs_roots_recovered: version 15)
      expect(indexes.map((i) => i.name)).toEqual(["runs_by_change", "runs_by_parent", "runs_roots_by_created", "runs_roots_by_origin", "runs_roots_by_status", "runs_roots_recovered"]);
    } finally {
      raw.close();
    }
  });
});
