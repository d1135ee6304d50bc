/**
 * Messages to stages and prompts to humans, on Postgres (the contract and
 * the delivery states: MessageStore in ../messages.ts; the rules shared with
 * SQLite: ../message-rules.ts).
 *
 * The store relies on per-root serialisation that SQLite gets from its one
 * writer. Here, locks, in the order every transaction takes them (so none
 * can wait on another in a cycle):
 * 1. `pg_advisory_xact_lock(MESSAGE_LOCKS, hashtext(root id))`, held until
 *    commit, by every write of the store that reads before it writes
 *    (enqueue, claimForStage, bindForStage, settle, settleAll): two enqueues
 *    cannot both see room for the last queued place or sticky message, and
 *    an enqueue and a stage's claim see each other whole: either the
 *    enqueue sees the stage started (and binds its delivery to it, for live
 *    delivery) or the claim sees the message (and delivers it before the
 *    stage's first turn).
 * 2. The root's lease row. The driver's writes hold it FOR SHARE, checked
 *    (holder, epoch, released = 0) and kept until commit, so a takeover
 *    waits and cannot slip between the check and the writes; the events
 *    they journal go through the append code in the same transaction. An
 *    enqueue holds it FOR UPDATE while it reads the run and its stages:
 *    a stage start or a run's end appended by the driver (which locks that
 *    row too) commits either before those reads, which then see it, or
 *    after the enqueue, whose message the driver then sees (its
 *    `bindForStage` or `settleAll` on the next check).
 * Prompts need neither: answer and timeout are single fenced UPDATEs of an
 * open prompt (`state = 'open'` re-checked under the row lock: one wins).
 *
 * Paths are compared and ordered byte-wise (`collate "C"`, `starts_with`),
 * as SQLite does, whatever the database's collation.
 */

import { HANDED_STATES, deliveryStatesFrom, sqlStates } from "../delivery-states.ts";
import { LeaseLostError } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import { judgeLateAnswer, messageDigest, refuseOverLimits, refuseReusedId } from "../message-rules.ts";
import type { AppendEntry } from "../append.ts";
import type { DeliveryRecord, EnqueueResult, LiveDelivery, MessagePlanner, MessageRecord, MessageStore, NewMessage, StageAttempt, StageMail } from "../messages.ts";
import type { PromptRecord, PromptState } from "../prompts.ts";
import type { Lease } from "../runs.ts";
import type { StageRow } from "../stage-index.ts";
import { NOW_MS, type PgDriverWrites, type PgQuery, type PgSession } from "./store-session.ts";
import {
  deliveryFromRow,
  messageFromRow,
  promptFromRow,
  runFromRow,
  stageFromRow,
  type RunsTable,
  type DeliveriesTable as DeliveryRow,
  type MessagesTable as MessageRow,
  type PromptsTable as PromptRow,
  type StageIndexTable as StageIndexRow,
} from "../sqlite/tables.ts";

/** The first key of the store's advisory locks (the second is the root id's hash): apart from any other lock of atomic's. */
const MESSAGE_LOCKS = 0x61746d73; // "atms"

type MailRow = { seq: number; message_id: string; text: string; mode: string; sender: string };
type LiveRow = DeliveryRow & { text: string; mode: string; sender: string };

export class PgMessageStore implements MessageStore {
  constructor(
    private readonly db: PgSession,
    private readonly writes: PgDriverWrites,
  ) {}

  // ---------------------------------------------------------------- senders

  async enqueue(message: NewMessage, plan: MessagePlanner): Promise<EnqueueResult> {
    const digest = messageDigest(message);
    const root = message.rootId;
    return this.db.transaction(async (q) => {
      await lockRoot(q, root);
      const seen = (await q<MessageRow>("select * from messages where root_id = $1 and id = $2", [root, message.id]))[0];
      if (seen) {
        refuseReusedId(message, seen.digest, digest);
        const deliveries = await q<DeliveryRow>("select * from deliveries where root_id = $1 and message_id = $2 order by seq", [root, message.id]);
        return { status: "exists", message: messageFromRow(seen), deliveries: deliveries.map(deliveryFromRow) };
      }
      // Appends of the driver wait from here to the commit (file note, lock 2).
      await q("select 1 from leases where run_id = $1 for update", [root]);
      const run = (await q<RunsTable>("select * from runs where id = $1", [root]))[0];
      const planned = plan({ root: run ? runFromRow(run) : undefined, stages: await lookup(q, message) });
      const sticky = message.sticky ? await count(q, "select count(*)::int as n from messages where root_id = $1 and sticky = 1", [root]) : 0;
      const paths = [...new Set(planned.map((d) => d.stagePath))];
      const queued = new Map<string, number>();
      if (paths.length > 0) {
        const rows = await q<{ stage_path: string; n: number }>(
          `select stage_path, count(*)::int as n from deliveries
            where root_id = $1 and stage_path = any($2::text[]) and state = 'queued' group by stage_path`,
          [root, paths],
        );
        for (const r of rows) queued.set(r.stage_path, r.n);
      }
      refuseOverLimits(message, planned, () => sticky, (path) => queued.get(path) ?? 0);
      const row = (
        await q<MessageRow>(
          `insert into messages (root_id, id, target, text, mode, sticky, sender, digest, created_at)
           values ($1, $2, $3, $4, $5, $6, $7, $8, ${NOW_MS}) returning *`,
          [root, message.id, message.target, message.text, message.mode, message.sticky ? 1 : 0, message.sender, digest],
        )
      )[0]!;
      const deliveries =
        planned.length === 0
          ? []
          : await q<DeliveryRow>(
              `insert into deliveries (root_id, message_id, stage_path, run_id, stage_key, state, created_at)
               select $1, $2, p.path, p.run_id, p.stage_key, 'queued', ${NOW_MS}
                 from unnest($3::text[], $4::text[], $5::text[]) with ordinality as p(path, run_id, stage_key, o)
                order by p.o
               on conflict do nothing
               returning *`,
              [root, message.id, planned.map((d) => d.stagePath), planned.map((d) => d.runId ?? null), planned.map((d) => d.stageKey ?? null)],
            );
      return { status: "queued", message: messageFromRow(row), deliveries: deliveries.map(deliveryFromRow).sort((a, b) => a.seq - b.seq) };
    });
  }

  async answerPrompt(rootId: RunId, promptId: string, answer: string, by: string): Promise<{ status: "answered" | "exists"; prompt: PromptRecord }> {
    return this.db.run(async (q) => {
      const answered = await q<PromptRow>(
        `update prompts set state = 'answered', answer = $1, answered_by = $2, answered_at = ${NOW_MS}
          where root_id = $3 and id = $4 and state = 'open' returning *`,
        [answer, by, rootId, promptId],
      );
      if (answered[0]) return { status: "answered" as const, prompt: promptFromRow(answered[0]) };
      const current = (await q<PromptRow>("select * from prompts where root_id = $1 and id = $2", [rootId, promptId]))[0];
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
    return this.fenced(lease, async (q) => {
      await this.writes.upsertStage(q, lease.rootId, stage.runId, { key: stage.stageKey, path: stage.path, name: stage.name, kind: "stage", state: "running", attempt: stage.attempt });
      const fresh = new Set<number>();
      // Queued for this path and not yet bound, or bound to this very stage; a row that would duplicate a
      // delivery the stage already has is left for the next stage of that path (SQLite: UPDATE OR IGNORE).
      const claimed = await q<{ seq: number }>(
        `update deliveries d set state = 'delivered', run_id = $1, stage_key = $2, attempt = $3, settled_at = ${NOW_MS}
          where d.root_id = $4 and d.stage_path = $5 and d.state = 'queued'
            and (d.stage_key is null or (d.run_id = $1 and d.stage_key = $2))
            and not exists (select 1 from deliveries o
                             where o.root_id = d.root_id and o.message_id = d.message_id and o.stage_path = d.stage_path
                               and o.run_id = $1 and o.stage_key = $2 and o.seq <> d.seq)
          returning d.seq`,
        [stage.runId, stage.stageKey, stage.attempt, lease.rootId, stage.path],
      );
      for (const r of claimed) fresh.add(r.seq);
      for (const r of await this.insertSticky(q, lease.rootId, stage, matches, "delivered")) fresh.add(r);
      if (stage.attempt > 1) {
        const replace = deliveryStatesFrom("replace");
        await q(
          `update deliveries set state = '${replace.to}', settled_at = ${NOW_MS},
                  reason = 'the session of attempt ' || attempt || ' was replaced by attempt ' || $3::int || ', which was given the message again'
            where run_id = $1 and stage_key = $2 and attempt < $3::int and state in (${sqlStates(replace.from)})`,
          [stage.runId, stage.stageKey, stage.attempt],
        );
      }
      const mail: StageMail[] = (
        await q<MailRow>(
          `select d.seq, d.message_id, m.text, m.mode, m.sender
             from deliveries d join messages m on m.root_id = d.root_id and m.id = d.message_id
            where d.run_id = $1 and d.stage_key = $2 and d.state in (${sqlStates(HANDED_STATES)})
            order by d.seq`,
          [stage.runId, stage.stageKey],
        )
      ).map((r) => ({
        deliverySeq: r.seq,
        messageId: r.message_id,
        text: r.text,
        mode: r.mode as StageMail["mode"],
        sender: r.sender,
        fresh: fresh.has(r.seq),
      }));
      if (fresh.size > 0) {
        const entry = event(mail.filter((m) => m.fresh));
        if (entry) await this.writes.appendInTransaction(q, lease, entry);
      }
      return mail;
    });
  }

  async bindForStage(lease: Lease, stage: StageAttempt, matches: (pattern: string) => boolean): Promise<number> {
    return this.fenced(lease, async (q) => {
      const bound = await q(
        `update deliveries d set run_id = $1, stage_key = $2
          where d.root_id = $3 and d.stage_path = $4 and d.state = 'queued' and d.stage_key is null
            and not exists (select 1 from deliveries o
                             where o.root_id = d.root_id and o.message_id = d.message_id and o.stage_path = d.stage_path
                               and o.run_id = $1 and o.stage_key = $2)
          returning d.seq`,
        [stage.runId, stage.stageKey, lease.rootId, stage.path],
      );
      return bound.length + (await this.insertSticky(q, lease.rootId, stage, matches, "queued")).length;
    });
  }

  async settle(
    lease: Lease,
    changes: { seq: number; state: "delivered" | "stage-terminal" | "undeliverable"; attempt?: number; reason?: string }[],
    events: (changed: number[]) => AppendEntry[],
  ): Promise<number[]> {
    if (changes.length === 0) return [];
    return this.fenced(lease, async (q) => {
      const rows = await q<{ seq: number }>(
        `update deliveries d set state = c.state, attempt = coalesce(c.attempt, d.attempt), reason = c.reason, settled_at = ${NOW_MS}
           from unnest($2::bigint[], $3::text[], $4::int[], $5::text[]) as c(seq, state, attempt, reason)
          where d.seq = c.seq and d.root_id = $1 and d.state = 'queued'
          returning d.seq`,
        [lease.rootId, changes.map((c) => c.seq), changes.map((c) => c.state), changes.map((c) => c.attempt ?? null), changes.map((c) => c.reason ?? null)],
      );
      const done = new Set(rows.map((r) => r.seq));
      const changed = changes.filter((c) => done.has(c.seq)).map((c) => c.seq);
      if (changed.length > 0) for (const entry of events(changed)) await this.writes.appendInTransaction(q, lease, entry);
      return changed;
    });
  }

  async confirm(lease: Lease, stage: { runId: RunId; stageKey: string; attempt: number }, messageIds: string[]): Promise<string[]> {
    const confirm = deliveryStatesFrom("confirm");
    return this.fenced(lease, async (q) => {
      const rows = await q<{ message_id: string }>(
        `update deliveries set state = '${confirm.to}', settled_at = ${NOW_MS}
          where run_id = $1 and stage_key = $2 and attempt = $3 and message_id = any($4::text[]) and state in (${sqlStates(confirm.from)})
          returning message_id`,
        [stage.runId, stage.stageKey, stage.attempt, messageIds],
      );
      return rows.map((r) => r.message_id);
    });
  }

  async endAttempt(lease: Lease, stage: { runId: RunId; stageKey: string; attempt: number }, reason: string): Promise<string[]> {
    if (!(await this.hasMail(lease.rootId))) return [];
    const end = deliveryStatesFrom("end");
    return this.fenced(lease, async (q) => {
      const rows = await q<{ message_id: string }>(
        `update deliveries set state = '${end.to}', reason = $1, settled_at = ${NOW_MS}
          where run_id = $2 and stage_key = $3 and attempt = $4 and state in (${sqlStates(end.from)})
          returning message_id`,
        [reason, stage.runId, stage.stageKey, stage.attempt],
      );
      return rows.map((r) => r.message_id);
    });
  }

  async settleAll(lease: Lease, rootId: RunId, reason: string, pathPrefix?: string): Promise<number> {
    if (rootId !== lease.rootId) throw new Error(`internal: settling messages of ${rootId} under the lease of ${lease.rootId}`);
    if (!(await this.hasMail(rootId))) return 0;
    return this.fenced(lease, async (q) => {
      const rows = await q(
        `update deliveries set state = 'undeliverable', reason = $1, settled_at = ${NOW_MS}
          where root_id = $2 and state = 'queued' and ($3::text is null or starts_with(stage_path, $3::text))
          returning seq`,
        [reason, rootId, pathPrefix ?? null],
      );
      return rows.length;
    });
  }

  async timeOutPrompt(lease: Lease, rootId: RunId, promptId: string): Promise<PromptRecord | undefined> {
    return this.fenced(lease, async (q) => {
      await q(`update prompts set state = 'timed_out', answered_at = ${NOW_MS} where root_id = $1 and id = $2 and state = 'open'`, [rootId, promptId]);
      const row = (await q<PromptRow>("select * from prompts where root_id = $1 and id = $2", [rootId, promptId]))[0];
      return row ? promptFromRow(row) : undefined;
    }, false);
  }

  // ---------------------------------------------------------------- reads

  async hasMail(rootId: RunId): Promise<boolean> {
    return (await this.db.run((q) => q("select 1 from messages where root_id = $1 limit 1", [rootId]))).length > 0;
  }

  async liveQueued(rootId: RunId): Promise<LiveDelivery[]> {
    const rows = await this.db.run((q) =>
      q<LiveRow>(
        `select d.*, m.text, m.mode, m.sender
           from deliveries d join messages m on m.root_id = d.root_id and m.id = d.message_id
          where d.root_id = $1 and d.state = 'queued' and d.stage_key is not null
          order by d.seq`,
        [rootId],
      ),
    );
    return rows.map((r) => ({
      ...deliveryFromRow(r),
      runId: r.run_id as RunId,
      stageKey: r.stage_key!,
      text: r.text,
      mode: r.mode as LiveDelivery["mode"],
      sender: r.sender,
    }));
  }

  async stages(rootId: RunId): Promise<StageRow[]> {
    return (await this.db.run((q) => q<StageIndexRow>(`select * from stage_index where root_id = $1 ${STAGE_ORDER}`, [rootId]))).map(stageFromRow);
  }

  async messagesOf(rootId: RunId): Promise<{ messages: MessageRecord[]; deliveries: DeliveryRecord[] }> {
    return this.db.run(async (q) => ({
      messages: (await q<MessageRow>(`select * from messages where root_id = $1 order by created_at, id collate "C"`, [rootId])).map(messageFromRow),
      deliveries: (await q<DeliveryRow>("select * from deliveries where root_id = $1 order by seq", [rootId])).map(deliveryFromRow),
    }));
  }

  async getPrompt(rootId: RunId, promptId: string): Promise<PromptRecord | undefined> {
    const rows = await this.db.run((q) => q<PromptRow>("select * from prompts where root_id = $1 and id = $2", [rootId, promptId]));
    return rows[0] ? promptFromRow(rows[0]) : undefined;
  }

  async prompts(rootId: RunId, state?: PromptState): Promise<PromptRecord[]> {
    const rows = await this.db.run((q) =>
      state
        ? q<PromptRow>(`select * from prompts where root_id = $1 and state = $2 order by created_at, id collate "C"`, [rootId, state])
        : q<PromptRow>(`select * from prompts where root_id = $1 order by created_at, id collate "C"`, [rootId]),
    );
    return rows.map(promptFromRow);
  }

  // ---------------------------------------------------------------- helpers

  /**
   * A write transaction of the lease holder: the store's lock on the root
   * (unless `serialised` is false), then the lease row FOR SHARE until
   * commit; refused (LeaseLostError, nothing written) once the lease is lost.
   */
  private fenced<T>(lease: Lease, fn: (q: PgQuery) => Promise<T>, serialised = true): Promise<T> {
    return this.db.transaction(async (q) => {
      if (serialised) await lockRoot(q, lease.rootId);
      const held = await q("select 1 from leases where run_id = $1 and holder_id = $2 and epoch = $3 and released = 0 for share", [
        lease.rootId,
        lease.holderId,
        lease.epoch,
      ]);
      if (held.length === 0) throw new LeaseLostError(lease.rootId, lease.epoch);
      return fn(q);
    });
  }

  /** Deliveries of the root's matching sticky messages to a starting stage (none twice); their seqs. */
  private async insertSticky(q: PgQuery, rootId: RunId, stage: StageAttempt, matches: (pattern: string) => boolean, state: "queued" | "delivered"): Promise<number[]> {
    const sticky = await q<{ id: string; target: string }>(`select id, target from messages where root_id = $1 and sticky = 1 order by created_at, id collate "C"`, [rootId]);
    const ids = sticky.filter((m) => matches(m.target)).map((m) => m.id);
    if (ids.length === 0) return [];
    const delivered = state === "delivered";
    const rows = await q<{ seq: number }>(
      `insert into deliveries (root_id, message_id, stage_path, run_id, stage_key, state, attempt, created_at, settled_at)
       select $1, u.id, $2, $3, $4, $5, $6, ${NOW_MS}, ${delivered ? NOW_MS : "null"}
         from unnest($7::text[]) with ordinality as u(id, o)
        order by u.o
       on conflict do nothing
       returning seq`,
      [rootId, stage.path, stage.runId, stage.stageKey, state, delivered ? stage.attempt : null, ids],
    );
    return rows.map((r) => r.seq);
  }
}

const STAGE_ORDER = `order by path collate "C", run_id collate "C", stage_key collate "C"`;

/** The store's per-root lock (file note, lock 1), held until the transaction ends; retention.ts takes it too. */
export async function lockRoot(q: PgQuery, rootId: RunId): Promise<void> {
  await q(`select pg_advisory_xact_lock(${MESSAGE_LOCKS}, hashtext($1))`, [rootId]);
}

async function count(q: PgQuery, sql: string, values: unknown[]): Promise<number> {
  return (await q<{ n: number }>(sql, values))[0]?.n ?? 0;
}

/** The stage rows a message's planner is shown: the paths it names and those under its prefix (deduplicated). */
async function lookup(q: PgQuery, message: NewMessage): Promise<StageRow[]> {
  const paths = message.lookup.paths ?? [];
  const prefix = message.lookup.prefix ?? null;
  if (paths.length === 0 && prefix === null) return [];
  const rows = await q<StageIndexRow>(
    `select * from stage_index
      where root_id = $1 and (path = any($2::text[]) or ($3::text is not null and starts_with(path, $3::text)))
      ${STAGE_ORDER}`,
    [message.rootId, paths, prefix],
  );
  return rows.map(stageFromRow);
}
