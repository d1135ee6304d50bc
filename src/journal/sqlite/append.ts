/**
 * The append hot path: one IMMEDIATE transaction per batch.
 *
 * Order inside the transaction, which the invariants depend on:
 * 1. The lease is checked first (owner-fenced select). Lost: roll back,
 *    throw LeaseLostError, nothing written.
 * 2. Each entry: idempotency key seen before → "exists" with the first
 *    event; newRun → create the runs row; expectedSeq mismatch →
 *    "conflict"; else insert the event at last_seq + 1 and advance the
 *    runs projection (last_seq, updated_at, patch) in the same transaction.
 *    Everything that can fail without touching storage (JSON encoding, the
 *    checks) happens before the first write of the entry.
 * 3. With several entries, the batch is first written as a whole; if an
 *    entry turns out bad, that transaction rolls back and the batch is
 *    written again with each entry inside a savepoint, so a bad entry rolls
 *    back alone and reports "error"; seqs stay gapless because a
 *    rolled-back entry never advanced last_seq. (Savepoints cost two
 *    statements per entry, and bad entries are rare.) With one entry the
 *    transaction itself is the unit.
 *
 * Storage faults (busy, disk full, I/O) are not a bad entry: they fail the
 * whole batch, which rolls back, and surface as StorageError.
 */

import { LeaseLostError, UsageError, errorInfo, type ErrorInfo } from "../../shared/errors.ts";
import type { AppendEntry, AppendOutcome } from "../append.ts";
import type { Lease, RunPatch } from "../runs.ts";
import type { StageIndexEntry } from "../stage-index.ts";
import { isStorageFault } from "./storage-errors.ts";
import { type RunForAppend, type Statements } from "./statements.ts";
import { eventFromRow, toJson } from "./tables.ts";

export function appendEntries(s: Statements, lease: Lease, entries: readonly AppendEntry[]): AppendOutcome[] {
  if (entries.length === 0) return [];
  const durable = entries.some((e) => e.durable !== false);
  s.setSyncFor(durable);
  try {
    return appendBatch(s, lease, entries);
  } finally {
    // Every other write of this connection (leases, queues, messages) keeps the journal's setting.
    if (!durable) s.setSyncFor(true);
  }
}

function appendBatch(s: Statements, lease: Lease, entries: readonly AppendEntry[]): AppendOutcome[] {
  const now = Date.now();
  if (entries.length > 1) {
    const outcomes = inTransaction(s, lease, () => appendAllOrNothing(s, lease, entries, now));
    if (outcomes) return outcomes;
    // An entry was bad: the whole batch rolled back; again, each entry in a savepoint of its own.
    return inTransaction(s, lease, () => entries.map((entry) => appendInSavepoint(s, lease, entry, now)))!;
  }
  return inTransaction(s, lease, () => appendAlone(s, lease, entries[0] as AppendEntry, now))!;
}

/** BEGIN, the lease check, `fn`, COMMIT (unless `fn` rolled back or returned undefined: then it rolled back). */
function inTransaction(s: Statements, lease: Lease, fn: () => AppendOutcome[] | undefined): AppendOutcome[] | undefined {
  s.beginImmediate();
  try {
    if (!s.selectHeldLease.get(lease.rootId, lease.holderId, lease.epoch)) {
      throw new LeaseLostError(lease.rootId, lease.epoch);
    }
    const outcomes = fn();
    if (s.db.inTransaction) {
      if (outcomes) s.commit.run();
      else s.rollback.run();
    }
    return outcomes;
  } catch (err) {
    if (s.db.inTransaction) s.rollback.run();
    throw err;
  }
}

/**
 * Every entry of a batch, without savepoints (two statements fewer per
 * entry): undefined as soon as one is bad, for the caller to roll back and
 * take the savepoint path. Bad entries are rare (a payload that does not
 * encode, a run that does not exist); most batches are good.
 */
function appendAllOrNothing(s: Statements, lease: Lease, entries: readonly AppendEntry[], now: number): AppendOutcome[] | undefined {
  const outcomes: AppendOutcome[] = [];
  for (const entry of entries) {
    try {
      outcomes.push(appendEntry(s, lease, entry, now));
    } catch (err) {
      if (isStorageFault(err) || err instanceof LeaseLostError) throw err;
      return undefined;
    }
  }
  return outcomes;
}

/** A lone entry: on error the whole transaction rolls back (the caller sees `inTransaction` false and skips COMMIT). */
function appendAlone(s: Statements, lease: Lease, entry: AppendEntry, now: number): AppendOutcome[] {
  try {
    return [appendEntry(s, lease, entry, now)];
  } catch (err) {
    if (isStorageFault(err) || err instanceof LeaseLostError) throw err;
    s.rollback.run();
    return [errorOutcome(err)];
  }
}

function appendInSavepoint(s: Statements, lease: Lease, entry: AppendEntry, now: number): AppendOutcome {
  s.savepoint.run();
  try {
    const outcome = appendEntry(s, lease, entry, now);
    s.releaseSavepoint.run();
    return outcome;
  } catch (err) {
    if (isStorageFault(err)) throw err;
    s.rollbackToSavepoint.run();
    s.releaseSavepoint.run();
    return errorOutcome(err);
  }
}

function errorOutcome(err: unknown): AppendOutcome {
  return { status: "error", error: errorInfo(err) };
}

/** One entry inside the caller's transaction (the lease already checked): also used by the message store's fenced writes. */
export function appendEntry(s: Statements, lease: Lease, entry: AppendEntry, now: number): AppendOutcome {
  const at = entry.at ?? now;
  const idempotencyKey = entry.idempotencyKey ?? null;
  const payload = toJson(entry.payload);
  const patch = entry.patch ? encodePatch(entry.patch) : undefined;

  let run = s.selectRunForAppend.get(entry.runId, idempotencyKey);
  if (run) requireSameRoot(entry.runId, run.root_id, lease);
  if (run && run.idem_seq !== null) {
    const first = s.selectEvent.get(entry.runId, run.idem_seq);
    if (first) return { status: "exists", seq: first.seq, event: eventFromRow(first) };
  }

  if (entry.newRun) {
    if (run) throw new UsageError("run_exists", `run ${entry.runId} already exists`);
    requireSameRoot(entry.runId, entry.newRun.rootId, lease);
    if (entry.expectedSeq !== undefined && entry.expectedSeq !== 0) {
      return { status: "conflict", lastSeq: 0, expectedSeq: entry.expectedSeq };
    }
    const n = entry.newRun;
    s.insertRun.run(
      entry.runId,
      n.rootId,
      n.parentId,
      n.parentKey,
      n.depth,
      n.workflowName,
      n.workflowPath,
      n.workflowDigest,
      toJson(n.inputs),
      at,
      at,
    );
    run = { root_id: n.rootId, last_seq: 0, idem_seq: null } satisfies RunForAppend;
  } else if (!run) {
    throw new UsageError("run_not_found", `run ${entry.runId} does not exist`);
  }

  if (entry.expectedSeq !== undefined && entry.expectedSeq !== run.last_seq) {
    return { status: "conflict", lastSeq: run.last_seq, expectedSeq: entry.expectedSeq };
  }

  const seq = run.last_seq + 1;
  s.insertEvent.run(entry.runId, seq, entry.type, entry.key ?? null, idempotencyKey, payload, at);
  if (patch) {
    s.advanceRunWithPatch.run(
      seq,
      at,
      patch.status,
      patch.setOutputs,
      patch.outputs,
      patch.setError,
      patch.error,
      patch.setEndedAt,
      patch.endedAt,
      patch.clearControl,
      patch.workflowDigest,
      entry.runId,
      patch.controlAck,
    );
  } else {
    s.advanceRun.run(seq, at, entry.runId);
  }
  if (entry.work) {
    const w = entry.work;
    // The appending lease's epoch: only this drive's pool may claim the item (ClaimScope in ../work-queue.ts).
    s.insertWork.run(w.id, run.root_id, entry.runId, lease.epoch, w.stageKey, w.attempt, toJson(w.descriptor) ?? "null", at, at, at);
  }
  if (entry.abandonWork) s.abandonWork.run(at, entry.abandonWork, run.root_id);
  if (entry.stage) upsertStage(s, run.root_id, entry.runId, entry.stage, at);
  if (entry.prompt) {
    const p = entry.prompt;
    s.insertPrompt.run(run.root_id, p.id, entry.runId, entry.key ?? "", p.question, p.choices ? JSON.stringify(p.choices) : null, p.deadline, at);
  }
  return { status: "appended", seq };
}

/** A stage's row in the stage index follows its latest record; usage adds up (statements.ts). */
export function upsertStage(s: Statements, rootId: string, runId: string, g: StageIndexEntry, at: number): void {
  const u = g.usage;
  s.upsertStage.run(
    rootId,
    runId,
    g.key,
    g.path,
    g.name,
    g.kind,
    g.state,
    g.attempt,
    g.childRunId ?? null,
    at,
    g.state === "finished" && g.kind === "stage" ? (g.outcome ?? "completed") : null,
    u?.inputTokens || 0,
    u?.outputTokens || 0,
    u?.cacheReadTokens || 0,
    u?.cacheWriteTokens || 0,
    Math.round(u?.costMicroUsd || 0),
    u?.turns || 0,
    u ? 1 : 0,
  );
}

function requireSameRoot(runId: string, rootId: string, lease: Lease): void {
  if (rootId === lease.rootId) return;
  throw new UsageError(
    "run_outside_lease",
    `run ${runId} belongs to root run ${rootId}, not to ${lease.rootId} whose lease this append holds`,
  );
}

/** The bindings of `advanceRunWithPatch`: a 0/1 flag per nullable field says whether to set it. */
interface EncodedPatch {
  status: string | null;
  setOutputs: number;
  outputs: string | null;
  setError: number;
  error: string | null;
  setEndedAt: number;
  endedAt: number | null;
  clearControl: number;
  workflowDigest: string | null;
  controlAck: number | null;
}

function encodePatch(p: RunPatch): EncodedPatch {
  const error: ErrorInfo | null | undefined = p.error;
  return {
    status: p.status ?? null,
    setOutputs: "outputs" in p ? 1 : 0,
    outputs: toJson(p.outputs),
    setError: "error" in p ? 1 : 0,
    error: error ? JSON.stringify(error) : null,
    setEndedAt: "endedAt" in p ? 1 : 0,
    endedAt: p.endedAt ?? null,
    clearControl: p.clearControl ? 1 : 0,
    workflowDigest: p.workflowDigest ?? null,
    controlAck: p.controlAck ?? null,
  };
}
