/**
 * The append path on Postgres: entries encoded here, written by one call of
 * the schema's `append_entries` function (append-sql.ts says what it does
 * and in which order), outcomes decoded here.
 *
 * Encoding happens before anything is sent: an entry whose payload JSON
 * cannot hold (a function, a BigInt) is an "error" outcome and is not sent
 * at all, so it can never take a seq.
 *
 * Exactly once across a lost connection: every call carries a fresh batch
 * id, and `append_entries` records its outcomes under it in the same
 * transaction. When the connection breaks while the call is under way, the
 * receipt is looked up and, when there is none, the call is made again with
 * the same id (with backoff, within the connection's retry time): if the
 * first one committed, its recorded outcomes come back and nothing is
 * written twice; if not, it runs now. A retry that races the first call
 * still in flight on the server loses on the batch id's primary key (23505)
 * and asks again. (A first call does not look: its id is new.)
 *
 * Durability: a batch without a durable entry commits with
 * synchronous_commit off; with `--durability normal` every batch does.
 * Except a batch that enqueues work (a queued stage's start record and its
 * work item): it always waits for the disk. The server can crash and
 * restart while this process lives on (a power cut of a SQLite journal's
 * machine takes its root with it), and the root then waits for the item's
 * outcome: an item lost with the server's unwritten log would never be
 * claimed nor settled, and the run would wait for good
 * (test/fleet/host-outage-points.test.ts, "crashed right after the root
 * enqueued a stage").
 */

import { LeaseLostError, UsageError, errorInfo } from "../../shared/errors.ts";
import { backoffDelay } from "../../shared/backoff.ts";
import type { AppendEntry, AppendOutcome } from "../append.ts";
import type { Durability } from "../journal.ts";
import type { JournalEvent, Lease, RunPatch } from "../runs.ts";
import type { StageIndexEntry } from "../stage-index.ts";
import { RECONNECT_BACKOFF, isConnectionLoss, sqlState, type Client, type PgConnection } from "./connection.ts";
import { APPEND_EVENT_SQL } from "./append-sql-v8.ts";
import { toJson } from "../sqlite/tables.ts";

type Encoded = { ok: true; value: Record<string, unknown> } | { ok: false; outcome: AppendOutcome };

interface RawOutcome {
  status: "appended" | "exists" | "conflict" | "error";
  seq?: number;
  type?: string;
  key?: string | null;
  idem?: string | null;
  payload?: string | null;
  at?: number;
  lastSeq?: number;
  expectedSeq?: number;
  code?: string;
  message?: string;
}

const APPEND_SQL = "select append_entries($1, $2, $3, $4, $5, $6, $7::jsonb, $8) as outcomes";
const RECEIPT_SQL = "select outcomes::jsonb as outcomes from append_batches where id = $1";

/** A SQLSTATE a bad entry raises (not a fault of the database: those fail the batch; see append-sql.ts). */
function isBadEntry(state: string | undefined): boolean {
  return state !== undefined && state !== "AT001" && !["08", "40", "53", "54", "55", "57", "58", "XX"].includes(state.slice(0, 2));
}

export async function appendEntries(conn: PgConnection, durability: Durability, lease: Lease, entries: readonly AppendEntry[]): Promise<AppendOutcome[]> {
  if (entries.length === 0) return [];
  const encoded = entries.map(encodeEntry);
  const sendable = encoded.flatMap((e) => (e.ok ? [e.value] : []));
  if (sendable.length === 0) return encoded.map((e) => (e as { outcome: AppendOutcome }).outcome);
  const durable = (durability === "full" && entries.some((e) => e.durable !== false)) || entries.some((e) => e.work !== undefined);
  const batch = crypto.randomUUID();
  const sync = durable ? null : "off";
  const now = Date.now();
  if (encoded.length === 1 && isPlainEvent(sendable[0]!)) {
    // Nothing written when the run is not this root's (or the entry was bad): the function says why, as its outcome.
    const seq = await appendEvent(conn, lease, batch, sync, now, sendable[0]!).catch((err: unknown) => {
      if (isBadEntry(sqlState(err))) return undefined;
      throw err;
    });
    if (seq !== undefined) return [{ status: "appended", seq }];
  }
  const values = [lease.rootId, lease.holderId, lease.epoch, batch, sync, now, JSON.stringify(sendable), false];
  const call = (isolate: boolean) =>
    callWithRetry(conn, lease, batch, async (c) => (await c.query<{ outcomes: RawOutcome[] }>({ name: "append", text: APPEND_SQL, values: [...values.slice(0, 7), isolate] })).rows[0]!.outcomes);
  let raw: RawOutcome[];
  try {
    raw = await call(false);
  } catch (err) {
    // An entry was bad: nothing was written; again, each entry in a savepoint of its own.
    if (!isBadEntry(sqlState(err))) throw err;
    raw = await call(true);
  }
  let next = 0;
  return encoded.map((e) => (e.ok ? decodeOutcome(raw[next++]!, e.value.run as string) : e.outcome));
}

/** Rows of one statement, on the caller's connection (inside its transaction). */
export type RowsOf = (text: string, values: unknown[]) => Promise<Record<string, unknown>[]>;

/** One append call inside the caller's transaction (the message store's fenced writes): no batch id, the caller's durability. */
export async function appendInTransaction(q: RowsOf, lease: Lease, entries: readonly AppendEntry[]): Promise<AppendOutcome[]> {
  const encoded = entries.map(encodeEntry);
  const sendable = encoded.flatMap((e) => (e.ok ? [e.value] : []));
  let raw: RawOutcome[] = [];
  if (sendable.length > 0) {
    try {
      // Isolated: inside the caller's transaction a failed call would abort it all.
      const rows = await q(APPEND_SQL, [lease.rootId, lease.holderId, lease.epoch, null, null, Date.now(), JSON.stringify(sendable), true]);
      raw = rows[0]!.outcomes as RawOutcome[];
    } catch (err) {
      if (sqlState(err) === "AT001") throw new LeaseLostError(lease.rootId, lease.epoch);
      throw err;
    }
  }
  let next = 0;
  return encoded.map((e) => (e.ok ? decodeOutcome(raw[next++]!, e.value.run as string) : e.outcome));
}

/** What APPEND_EVENT_SQL writes (append-sql-v8.ts): an event; no patch of its run's row (a change number), key, CAS, work, stage or prompt. */
const EVENT_FIELDS = new Set(["run", "type", "key", "payload", "at"]);

function isPlainEvent(e: Record<string, unknown>): boolean {
  for (const key in e) if (!EVENT_FIELDS.has(key)) return false;
  return true;
}

/** One plain event in one statement: its seq, or undefined when the run is not this root's (nothing written). */
async function appendEvent(conn: PgConnection, lease: Lease, batch: string, sync: string | null, now: number, e: Record<string, unknown>): Promise<number | undefined> {
  const values = [lease.rootId, lease.holderId, lease.epoch, batch, sync, e.run, e.type, e.key ?? null, e.payload ?? null, e.at ?? now, now];
  const out = await callWithRetry(conn, lease, batch, async (c) => {
    const { seq } = (await c.query<{ seq: number | null }>({ name: "append-event", text: APPEND_EVENT_SQL, values })).rows[0]!;
    if (seq === 0) throw new LeaseLostError(lease.rootId, lease.epoch);
    return seq === null ? [] : [{ status: "appended" as const, seq }];
  });
  return out[0]?.seq;
}

/**
 * `call` on a pooled client, made again after a lost connection (see the
 * file note): first the receipt of `batch` is looked up, since the call
 * that was under way may have committed.
 */
async function callWithRetry(conn: PgConnection, lease: Lease, batch: string, call: (c: Client) => Promise<RawOutcome[]>): Promise<RawOutcome[]> {
  const deadline = Date.now() + conn.retryMs;
  for (let attempt = 0; ; attempt++) {
    try {
      return await conn.withClient(async (c) => {
        // A first call's batch id is new: nothing to look up.
        if (attempt > 0) {
          const receipt = (await c.query<{ outcomes: RawOutcome[] }>({ name: "append-receipt", text: RECEIPT_SQL, values: [batch] })).rows[0];
          if (receipt) return receipt.outcomes;
        }
        return call(c);
      }, false);
    } catch (err) {
      if (err instanceof LeaseLostError) throw err;
      const state = sqlState(err) ?? sqlState((err as { cause?: unknown }).cause);
      if (state === "AT001") throw new LeaseLostError(lease.rootId, lease.epoch);
      // 23505 on the batch id: the first call of this batch was still in flight (see the file note).
      const batchClash = state === "23505" && /append_batches/.test(String((err as { constraint?: unknown }).constraint ?? (err as Error).message));
      const lost = isConnectionLoss(err) ? err : isConnectionLoss((err as { cause?: unknown }).cause) ? (err as { cause?: unknown }).cause : undefined;
      // A lost connection: within the outage's window (connection.ts); a clash or a conflict: a few times, quickly.
      const retry = lost !== undefined ? conn.mayRetry(lost) : (batchClash || state === "40001" || state === "40P01") && !conn.closed && Date.now() < deadline;
      if (!retry) throw conn.mapError(err);
      if (lost !== undefined) await conn.backoff(attempt);
      else await Bun.sleep(backoffDelay(RECONNECT_BACKOFF, attempt));
    }
  }
}

function decodeOutcome(o: RawOutcome, runId: string): AppendOutcome {
  switch (o.status) {
    case "appended":
      return { status: "appended", seq: o.seq! };
    case "exists": {
      const event: JournalEvent = {
        runId: runId as JournalEvent["runId"],
        seq: o.seq!,
        type: o.type!,
        key: o.key ?? null,
        idempotencyKey: o.idem ?? null,
        payload: o.payload === null || o.payload === undefined ? undefined : JSON.parse(o.payload),
        at: o.at!,
      };
      return { status: "exists", seq: o.seq!, event };
    }
    case "conflict":
      return { status: "conflict", lastSeq: o.lastSeq!, expectedSeq: o.expectedSeq! };
    default:
      return { status: "error", error: errorInfo(new UsageError(o.code ?? "error", o.message ?? "the entry was refused")) };
  }
}

function encodeEntry(entry: AppendEntry): Encoded {
  try {
    const e: Record<string, unknown> = { run: entry.runId, type: entry.type, payload: toJson(entry.payload) };
    if (entry.key != null) e.key = entry.key;
    if (entry.idempotencyKey != null) e.idem = entry.idempotencyKey;
    if (entry.expectedSeq !== undefined) e.expected = entry.expectedSeq;
    if (entry.at !== undefined) e.at = Math.round(entry.at);
    if (entry.newRun) e.newRun = { ...entry.newRun, inputs: toJson(entry.newRun.inputs) };
    if (entry.patch) e.patch = encodePatch(entry.patch);
    if (entry.work) e.work = { id: entry.work.id, stageKey: entry.work.stageKey, attempt: entry.work.attempt, descriptor: toJson(entry.work.descriptor) ?? "null" };
    if (entry.abandonWork !== undefined) e.abandonWork = entry.abandonWork;
    if (entry.stage) e.stage = encodeStage(entry.stage);
    if (entry.prompt) {
      const p = entry.prompt;
      e.prompt = { id: p.id, question: p.question, choices: p.choices ? JSON.stringify(p.choices) : null, deadline: p.deadline };
    }
    return { ok: true, value: e };
  } catch (err) {
    return { ok: false, outcome: { status: "error", error: errorInfo(err) } };
  }
}

/** Keys present only for the fields the patch sets (the function tests presence). */
function encodePatch(p: RunPatch): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (p.status !== undefined) out.status = p.status;
  if ("outputs" in p) out.outputs = toJson(p.outputs);
  if ("error" in p) out.error = p.error ? JSON.stringify(p.error) : null;
  if ("endedAt" in p) out.endedAt = p.endedAt ?? null;
  if (p.clearControl) out.clearControl = true;
  if (p.workflowDigest !== undefined) out.workflowDigest = p.workflowDigest;
  if (p.controlAck !== undefined) out.controlAck = p.controlAck;
  return out;
}

/** The stage row's values, as the SQLite journal derives them (../sqlite/append.ts upsertStage). */
export function encodeStage(g: StageIndexEntry): Record<string, unknown> {
  const u = g.usage;
  return {
    key: g.key,
    path: g.path,
    name: g.name,
    kind: g.kind,
    state: g.state,
    attempt: g.attempt,
    childRunId: g.childRunId ?? null,
    outcome: g.state === "finished" && g.kind === "stage" ? (g.outcome ?? "completed") : null,
    i: u?.inputTokens || 0,
    o: u?.outputTokens || 0,
    cr: u?.cacheReadTokens || 0,
    cw: u?.cacheWriteTokens || 0,
    c: Math.round(u?.costMicroUsd || 0),
    t: u?.turns || 0,
    u: u ? 1 : 0,
  };
}
