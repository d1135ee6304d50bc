/**
 * Messages to stages and prompts to humans, on SQLite (the contract and the
 * delivery states: MessageStore in ../messages.ts).
 *
 * Every write runs synchronously inside BEGIN IMMEDIATE (statements.ts
 * explains why), so a sender's enqueue and a driver's claim at stage start
 * are serialized: either the enqueue sees the stage started (and binds its
 * delivery to it, for live delivery) or the claim sees the message (and
 * delivers it before the stage's first turn). Nothing falls between.
 *
 * The driver's writes are owner-fenced like appends: the lease is checked
 * in the same transaction, and the events they journal are appended with
 * the append path's own code (appendEntry), so seqs stay gapless.
 *
 * Work per operation is proportional to the messages it touches, never to
 * a run's history: stage lookups go by (root, path); limits count queued
 * rows through a partial index; the driver's poll reads queued rows bound
 * to stages through another.
 */

import { HANDED_STATES, deliveryStatesFrom, sqlStates } from "../delivery-states.ts";
import type { Database, Statement } from "bun:sqlite";
import { LeaseLostError } from "../../shared/errors.ts";
import { judgeLateAnswer, messageDigest, refuseOverLimits, refuseReusedId } from "../message-rules.ts";
import type { RunId } from "../../shared/ids.ts";
import type { AppendEntry } from "../append.ts";
import type { DeliveryRecord, EnqueueResult, LiveDelivery, MessagePlanner, MessageRecord, MessageStore, NewMessage, StageAttempt, StageMail } from "../messages.ts";
import type { PromptRecord, PromptState } from "../prompts.ts";
import type { Lease } from "../runs.ts";
import type { StageRow } from "../stage-index.ts";
import { appendEntry, upsertStage } from "./append.ts";
import { writeTransaction, type Statements } from "./statements.ts";
import {
  deliveryFromRow,
  messageFromRow,
  promptFromRow,
  runFromRow,
  stageFromRow,
  type DeliveriesTable,
  type MessagesTable,
  type PromptsTable,
  type RunsTable,
  type StageIndexTable,
} from "./tables.ts";

type Mail = { seq: number; message_id: string; text: string; mode: string; sender: string };
type LiveRow = DeliveriesTable & { text: string; mode: string; sender: string };

/** The highest code point: `prefix` ≤ path < `prefix + END` selects the paths starting with prefix. */
const END = "\u{10ffff}";

export class SqliteMessageStore implements MessageStore {
  private readonly selectRun: Statement<RunsTable, [id: string]>;
  private readonly stagesByPath: Statement<StageIndexTable, [rootId: string, path: string]>;
  private readonly stagesInRange: Statement<StageIndexTable, [rootId: string, from: string, to: string]>;
  private readonly stagesOfRoot: Statement<StageIndexTable, [rootId: string]>;
  private readonly selectMessage: Statement<MessagesTable, [rootId: string, id: string]>;
  private readonly insertMessage: Statement<MessagesTable, [string, string, string, string, string, number, string, string, number]>;
  private readonly countSticky: Statement<{ n: number }, [rootId: string]>;
  private readonly countQueued: Statement<{ n: number }, [rootId: string, path: string]>;
  private readonly insertDelivery: Statement<DeliveriesTable, [string, string, string, string | null, string | null, number]>;
  private readonly deliveriesOfMessage: Statement<DeliveriesTable, [rootId: string, messageId: string]>;
  private readonly anyMessage: Statement<{ one: number }, [rootId: string]>;
  private readonly claimQueued: Statement<{ seq: number }, [runId: string, stageKey: string, attempt: number, now: number, rootId: string, path: string]>;
  private readonly stickyOfRoot: Statement<MessagesTable, [rootId: string]>;
  private readonly bindQueued: Statement<unknown, [runId: string, stageKey: string, rootId: string, path: string]>;
  private readonly insertDelivered: Statement<unknown, [string, string, string, string, string, number, number]>;
  private readonly mailOfStage: Statement<Mail, [runId: string, stageKey: string]>;
  private readonly replaceEarlier: Statement<unknown, [now: number, runId: string, stageKey: string, attempt: number]>;
  private readonly confirmOne: Statement<unknown, [now: number, runId: string, stageKey: string, attempt: number, messageId: string]>;
  private readonly endDelivered: Statement<{ message_id: string }, [reason: string, now: number, runId: string, stageKey: string, attempt: number]>;
  private readonly queuedBound: Statement<LiveRow, [rootId: string]>;
  private readonly settleOne: Statement<unknown, [state: string, attempt: number | null, reason: string | null, now: number, seq: number]>;
  private readonly settleRoot: Statement<unknown, [reason: string, now: number, rootId: string]>;
  private readonly settleRange: Statement<unknown, [reason: string, now: number, rootId: string, from: string, to: string]>;
  private readonly messagesOfRoot: Statement<MessagesTable, [rootId: string]>;
  private readonly deliveriesOfRoot: Statement<DeliveriesTable, [rootId: string]>;
  private readonly selectPrompt: Statement<PromptsTable, [rootId: string, id: string]>;
  private readonly answerOpen: Statement<PromptsTable, [answer: string, by: string, now: number, rootId: string, id: string]>;
  private readonly timeOutOpen: Statement<unknown, [now: number, rootId: string, id: string]>;
  private readonly promptsOfRoot: Statement<PromptsTable, [rootId: string]>;
  private readonly promptsInState: Statement<PromptsTable, [rootId: string, state: string]>;

  constructor(
    db: Database,
    private readonly s: Statements,
    /** Maps a storage failure to a StorageError, like every journal call. */
    private readonly guard: <T>(fn: () => T) => Promise<T>,
  ) {
    this.selectRun = db.prepare("select * from runs where id = ?");
    this.stagesByPath = db.prepare("select * from stage_index where root_id = ? and path = ?");
    this.stagesInRange = db.prepare("select * from stage_index where root_id = ? and path >= ? and path < ? order by path");
    this.stagesOfRoot = db.prepare("select * from stage_index where root_id = ? order by path, run_id, stage_key");
    this.selectMessage = db.prepare("select * from messages where root_id = ? and id = ?");
    this.insertMessage = db.prepare(
      `insert into messages (root_id, id, target, text, mode, sticky, sender, digest, created_at)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?) returning *`,
    );
    this.countSticky = db.prepare("select count(*) as n from messages where root_id = ? and sticky = 1");
    this.countQueued = db.prepare("select count(*) as n from deliveries where root_id = ? and stage_path = ? and state = 'queued'");
    this.insertDelivery = db.prepare(
      `insert or ignore into deliveries (root_id, message_id, stage_path, run_id, stage_key, state, created_at)
       values (?, ?, ?, ?, ?, 'queued', ?) returning *`,
    );
    this.deliveriesOfMessage = db.prepare("select * from deliveries where root_id = ? and message_id = ? order by seq");
    this.anyMessage = db.prepare("select 1 as one from messages where root_id = ? limit 1");
    // Queued for this path and not yet bound, or bound to this very stage. OR IGNORE: a row that would
    // duplicate a delivery the stage already has is left for the next stage of that path.
    this.claimQueued = db.prepare(
      `update or ignore deliveries set state = 'delivered', run_id = ?1, stage_key = ?2, attempt = ?3, settled_at = ?4
        where root_id = ?5 and stage_path = ?6 and state = 'queued'
          and (stage_key is null or (run_id = ?1 and stage_key = ?2))
        returning seq`,
    );
    this.bindQueued = db.prepare(
      `update or ignore deliveries set run_id = ?, stage_key = ?
        where root_id = ? and stage_path = ? and state = 'queued' and stage_key is null`,
    );
    this.stickyOfRoot = db.prepare("select * from messages where root_id = ? and sticky = 1 order by created_at, id");
    this.insertDelivered = db.prepare(
      `insert or ignore into deliveries (root_id, message_id, stage_path, run_id, stage_key, state, attempt, created_at, settled_at)
       values (?1, ?2, ?3, ?4, ?5, 'delivered', ?6, ?7, ?7)`,
    );
    this.mailOfStage = db.prepare(
      `select d.seq, d.message_id, m.text, m.mode, m.sender
         from deliveries d join messages m on m.root_id = d.root_id and m.id = d.message_id
        where d.run_id = ? and d.stage_key = ? and d.state in (${sqlStates(HANDED_STATES)})
        order by d.seq`,
    );
    const replace = deliveryStatesFrom("replace");
    this.replaceEarlier = db.prepare(
      `update deliveries set state = '${replace.to}', settled_at = ?1,
              reason = 'the session of attempt ' || attempt || ' was replaced by attempt ' || ?4 || ', which was given the message again'
        where run_id = ?2 and stage_key = ?3 and attempt < ?4 and state in (${sqlStates(replace.from)})`,
    );
    const confirm = deliveryStatesFrom("confirm");
    this.confirmOne = db.prepare(
      `update deliveries set state = '${confirm.to}', settled_at = ?1
        where run_id = ?2 and stage_key = ?3 and attempt = ?4 and message_id = ?5 and state in (${sqlStates(confirm.from)})`,
    );
    const end = deliveryStatesFrom("end");
    this.endDelivered = db.prepare(
      `update deliveries set state = '${end.to}', reason = ?1, settled_at = ?2
        where run_id = ?3 and stage_key = ?4 and attempt = ?5 and state in (${sqlStates(end.from)})
        returning message_id`,
    );
    this.queuedBound = db.prepare(
      `select d.*, m.text, m.mode, m.sender
         from deliveries d join messages m on m.root_id = d.root_id and m.id = d.message_id
        where d.root_id = ? and d.state = 'queued' and d.stage_key is not null
        order by d.seq`,
    );
    this.settleOne = db.prepare(
      `update deliveries set state = ?, attempt = coalesce(?, attempt), reason = ?, settled_at = ?
        where seq = ? and state = 'queued'`,
    );
    this.settleRoot = db.prepare(
      "update deliveries set state = 'undeliverable', reason = ?, settled_at = ? where root_id = ? and state = 'queued'",
    );
    this.settleRange = db.prepare(
      `update deliveries set state = 'undeliverable', reason = ?, settled_at = ?
        where root_id = ? and state = 'queued' and stage_path >= ? and stage_path < ?`,
    );
    this.messagesOfRoot = db.prepare("select * from messages where root_id = ? order by created_at, id");
    this.deliveriesOfRoot = db.prepare("select * from deliveries where root_id = ? order by seq");
    this.selectPrompt = db.prepare("select * from prompts where root_id = ? and id = ?");
    this.answerOpen = db.prepare(
      `update prompts set state = 'answered', answer = ?, answered_by = ?, answered_at = ?
        where root_id = ? and id = ? and state = 'open' returning *`,
    );
    this.timeOutOpen = db.prepare(
      "update prompts set state = 'timed_out', answered_at = ? where root_id = ? and id = ? and state = 'open'",
    );
    this.promptsOfRoot = db.prepare("select * from prompts where root_id = ? order by created_at, id");
    this.promptsInState = db.prepare("select * from prompts where root_id = ? and state = ? order by created_at, id");
  }

  // ---------------------------------------------------------------- senders

  async enqueue(message: NewMessage, plan: MessagePlanner): Promise<EnqueueResult> {
    const digest = messageDigest(message);
    return this.tx(() => {
      const seen = this.selectMessage.get(message.rootId, message.id);
      if (seen) {
        refuseReusedId(message, seen.digest, digest);
        return { status: "exists", message: messageFromRow(seen), deliveries: this.deliveriesOfMessage.all(message.rootId, message.id).map(deliveryFromRow) };
      }
      const runRow = this.selectRun.get(message.rootId);
      const planned = plan({ root: runRow ? runFromRow(runRow) : undefined, stages: this.lookup(message) });
      refuseOverLimits(
        message,
        planned,
        () => this.countSticky.get(message.rootId)?.n ?? 0,
        (path) => this.countQueued.get(message.rootId, path)?.n ?? 0,
      );
      const now = Date.now();
      const row = this.insertMessage.get(
        message.rootId,
        message.id,
        message.target,
        message.text,
        message.mode,
        message.sticky ? 1 : 0,
        message.sender,
        digest,
        now,
      )!;
      const deliveries: DeliveryRecord[] = [];
      for (const d of planned) {
        const inserted = this.insertDelivery.get(message.rootId, message.id, d.stagePath, d.runId ?? null, d.stageKey ?? null, now);
        if (inserted) deliveries.push(deliveryFromRow(inserted));
      }
      return { status: "queued", message: messageFromRow(row), deliveries };
    });
  }

  async answerPrompt(rootId: RunId, promptId: string, answer: string, by: string): Promise<{ status: "answered" | "exists"; prompt: PromptRecord }> {
    return this.tx(() => {
      const row = this.answerOpen.get(answer, by, Date.now(), rootId, promptId);
      if (row) return { status: "answered", prompt: promptFromRow(row) };
      const current = this.selectPrompt.get(rootId, promptId);
      return judgeLateAnswer(rootId, promptId, current ? promptFromRow(current) : undefined, answer);
    });
  }

  // ---------------------------------------------------------------- the driver

  async claimForStage(
    lease: Lease,
    stage: StageAttempt,
    matches: (pattern: string) => boolean,
    event: (fresh: StageMail[]) => AppendEntry | undefined,
  ): Promise<StageMail[]> {
    return this.fenced(lease, () => {
      const now = Date.now();
      upsertStage(this.s, lease.rootId, stage.runId, { key: stage.stageKey, path: stage.path, name: stage.name, kind: "stage", state: "running", attempt: stage.attempt }, now);
      const fresh = new Set<number>();
      for (const r of this.claimQueued.all(stage.runId, stage.stageKey, stage.attempt, now, lease.rootId, stage.path)) fresh.add(r.seq);
      for (const m of this.stickyOfRoot.all(lease.rootId)) {
        if (!matches(m.target)) continue;
        const { changes, lastInsertRowid } = this.insertDelivered.run(lease.rootId, m.id, stage.path, stage.runId, stage.stageKey, stage.attempt, now);
        if (changes > 0) fresh.add(Number(lastInsertRowid));
      }
      if (stage.attempt > 1) this.replaceEarlier.run(now, stage.runId, stage.stageKey, stage.attempt);
      const mail: StageMail[] = this.mailOfStage.all(stage.runId, stage.stageKey).map((r) => ({
        deliverySeq: r.seq,
        messageId: r.message_id,
        text: r.text,
        mode: r.mode as StageMail["mode"],
        sender: r.sender,
        fresh: fresh.has(r.seq),
      }));
      if (fresh.size > 0) {
        const entry = event(mail.filter((m) => m.fresh));
        if (entry) this.appendFenced(lease, entry, now);
      }
      return mail;
    });
  }

  async bindForStage(lease: Lease, stage: StageAttempt, matches: (pattern: string) => boolean): Promise<number> {
    return this.fenced(lease, () => {
      const now = Date.now();
      let n = this.bindQueued.run(stage.runId, stage.stageKey, lease.rootId, stage.path).changes;
      for (const m of this.stickyOfRoot.all(lease.rootId)) {
        if (!matches(m.target)) continue;
        n += this.insertDelivery.all(lease.rootId, m.id, stage.path, stage.runId, stage.stageKey, now).length;
      }
      return n;
    });
  }

  async settle(
    lease: Lease,
    changes: { seq: number; state: "delivered" | "stage-terminal" | "undeliverable"; attempt?: number; reason?: string }[],
    events: (changed: number[]) => AppendEntry[],
  ): Promise<number[]> {
    if (changes.length === 0) return [];
    return this.fenced(lease, () => {
      const now = Date.now();
      const changed = changes
        .filter((c) => this.settleOne.run(c.state, c.attempt ?? null, c.reason ?? null, now, c.seq).changes > 0)
        .map((c) => c.seq);
      if (changed.length > 0) for (const entry of events(changed)) this.appendFenced(lease, entry, now);
      return changed;
    });
  }

  async confirm(lease: Lease, stage: { runId: RunId; stageKey: string; attempt: number }, messageIds: string[]): Promise<string[]> {
    return this.fenced(lease, () => {
      const now = Date.now();
      return messageIds.filter((id) => this.confirmOne.run(now, stage.runId, stage.stageKey, stage.attempt, id).changes > 0);
    });
  }

  async endAttempt(lease: Lease, stage: { runId: RunId; stageKey: string; attempt: number }, reason: string): Promise<string[]> {
    if (!(await this.guard(() => this.anyMessage.get(lease.rootId)))) return [];
    return this.fenced(lease, () => this.endDelivered.all(reason, Date.now(), stage.runId, stage.stageKey, stage.attempt).map((r) => r.message_id));
  }

  async settleAll(lease: Lease, rootId: RunId, reason: string, pathPrefix?: string): Promise<number> {
    if (rootId !== lease.rootId) throw new Error(`internal: settling messages of ${rootId} under the lease of ${lease.rootId}`);
    if (!(await this.guard(() => this.anyMessage.get(rootId)))) return 0;
    return this.fenced(lease, () => {
      const now = Date.now();
      return pathPrefix === undefined
        ? this.settleRoot.run(reason, now, rootId).changes
        : this.settleRange.run(reason, now, rootId, pathPrefix, pathPrefix + END).changes;
    });
  }

  async timeOutPrompt(lease: Lease, rootId: RunId, promptId: string): Promise<PromptRecord | undefined> {
    return this.fenced(lease, () => {
      this.timeOutOpen.run(Date.now(), rootId, promptId);
      const row = this.selectPrompt.get(rootId, promptId);
      return row ? promptFromRow(row) : undefined;
    });
  }

  // ---------------------------------------------------------------- reads

  async hasMail(rootId: RunId): Promise<boolean> {
    return this.guard(() => this.anyMessage.get(rootId) !== null);
  }

  async liveQueued(rootId: RunId): Promise<LiveDelivery[]> {
    return this.guard(() =>
      this.queuedBound.all(rootId).map((r) => ({
        ...deliveryFromRow(r),
        runId: r.run_id as RunId,
        stageKey: r.stage_key!,
        text: r.text,
        mode: r.mode as LiveDelivery["mode"],
        sender: r.sender,
      })),
    );
  }

  async stages(rootId: RunId): Promise<StageRow[]> {
    return this.guard(() => this.stagesOfRoot.all(rootId).map(stageFromRow));
  }

  async messagesOf(rootId: RunId): Promise<{ messages: MessageRecord[]; deliveries: DeliveryRecord[] }> {
    return this.guard(() => ({
      messages: this.messagesOfRoot.all(rootId).map(messageFromRow),
      deliveries: this.deliveriesOfRoot.all(rootId).map(deliveryFromRow),
    }));
  }

  async getPrompt(rootId: RunId, promptId: string): Promise<PromptRecord | undefined> {
    return this.guard(() => {
      const row = this.selectPrompt.get(rootId, promptId);
      return row ? promptFromRow(row) : undefined;
    });
  }

  async prompts(rootId: RunId, state?: PromptState): Promise<PromptRecord[]> {
    return this.guard(() => (state ? this.promptsInState.all(rootId, state) : this.promptsOfRoot.all(rootId)).map(promptFromRow));
  }

  finalize(): void {
    for (const value of Object.values(this)) {
      if (value && typeof value === "object" && "finalize" in value && value !== this.s && typeof value !== "function") {
        (value as Statement).finalize();
      }
    }
  }

  // ---------------------------------------------------------------- helpers

  /** The stage rows a message's planner is shown (deduplicated). */
  private lookup(message: NewMessage): StageRow[] {
    const rows = new Map<string, StageIndexTable>();
    for (const path of message.lookup.paths ?? []) {
      for (const r of this.stagesByPath.all(message.rootId, path)) rows.set(`${r.run_id}\u0000${r.stage_key}`, r);
    }
    const prefix = message.lookup.prefix;
    if (prefix !== undefined) {
      const found = prefix === "" ? this.stagesOfRoot.all(message.rootId) : this.stagesInRange.all(message.rootId, prefix, prefix + END);
      for (const r of found) rows.set(`${r.run_id}\u0000${r.stage_key}`, r);
    }
    return [...rows.values()].map(stageFromRow);
  }

  private tx<T>(fn: () => T): Promise<T> {
    return this.guard(() => writeTransaction(this.s, fn));
  }

  /** A write transaction of the lease holder: refused (LeaseLostError, nothing written) once the lease is lost. */
  private fenced<T>(lease: Lease, fn: () => T): Promise<T> {
    return this.tx(() => {
      if (!this.s.selectHeldLease.get(lease.rootId, lease.holderId, lease.epoch)) throw new LeaseLostError(lease.rootId, lease.epoch);
      return fn();
    });
  }

  private appendFenced(lease: Lease, entry: AppendEntry, now: number): void {
    const outcome = appendEntry(this.s, lease, entry, now);
    if (outcome.status !== "appended") throw new Error(`internal: could not journal ${entry.type} (${outcome.status})`);
  }
}
