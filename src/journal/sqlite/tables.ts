/**
 * Row shapes of the SQLite journal's tables, as Kysely sees them, and the
 * mapping from rows to the journal's records.
 *
 * JSON columns (inputs, outputs, error, payload) hold `JSON.stringify` text.
 * SQL NULL stands for `undefined` and the text "null" for `null`, so a value
 * survives the round trip exactly at the top level. Times are milliseconds
 * since the epoch. `released` is 0 or 1.
 */

import type { ErrorInfo } from "../../shared/errors.ts";
import type { HolderId, RunId } from "../../shared/ids.ts";
import type { DeliveryRecord, DeliveryState, MessageMode, MessageRecord } from "../messages.ts";
import type { PromptRecord, PromptState } from "../prompts.ts";
import type { StartOrigin } from "../run-origin.ts";
import type { JournalEvent, Lease, RunRecord, RunStatus } from "../runs.ts";
import type { StageRow, StageState } from "../stage-index.ts";
import type { WorkItem, WorkState } from "../work-queue.ts";

export interface MetaTable {
  key: string;
  value: string;
}

export interface RunsTable {
  id: string;
  root_id: string;
  parent_id: string | null;
  parent_key: string | null;
  depth: number;
  workflow_name: string;
  workflow_path: string;
  workflow_digest: string;
  inputs: string | null;
  status: string;
  outputs: string | null;
  error: string | null;
  created_at: number;
  updated_at: number;
  ended_at: number | null;
  last_seq: number;
  control: string | null;
  control_rev: number;
  control_ack: number;
  /** Increases with every change of the row, across the journal (../views.ts, JournalViews). */
  change_seq: number;
  /** How the run was started and whether the service recovered it (0/1), kept by triggers (../run-origin-sql.ts). */
  origin: string | null;
  recovered: number;
}

export interface EventsTable {
  run_id: string;
  seq: number;
  type: string;
  key: string | null;
  idempotency_key: string | null;
  payload: string | null;
  at: number;
}

export interface LeasesTable {
  run_id: string;
  holder_id: string;
  host: string;
  pid: number;
  pid_start: number;
  epoch: number;
  renewed_at: number;
  timeout_ms: number;
  released: number;
}

export interface WorkItemsTable {
  id: string;
  root_id: string;
  run_id: string;
  root_epoch: number;
  stage_key: string;
  attempt: number;
  descriptor: string;
  state: string;
  generation: number;
  worker_id: string | null;
  epoch: number;
  lease_expires_at: number | null;
  ready_at: number;
  created_at: number;
  updated_at: number;
  result: string | null;
  error: string | null;
  /** The operation that committed the outcome, and its body's digest (migration 10). */
  op_id: string | null;
  op_digest: string | null;
}

export interface StageIndexTable {
  root_id: string;
  run_id: string;
  stage_key: string;
  path: string;
  name: string;
  kind: string;
  state: string;
  attempt: number;
  child_run_id: string | null;
  updated_at: number;
  outcome: string | null;
  input_tokens: number;
  output_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  cost_micro_usd: number;
  turns: number;
  /** 1 once any record of the stage carried usage. */
  has_usage: number;
}

export interface MessagesTable {
  root_id: string;
  id: string;
  target: string;
  text: string;
  mode: string;
  sticky: number;
  sender: string;
  digest: string;
  created_at: number;
}

export interface DeliveriesTable {
  seq: number;
  root_id: string;
  message_id: string;
  stage_path: string;
  run_id: string | null;
  stage_key: string | null;
  state: string;
  attempt: number | null;
  reason: string | null;
  created_at: number;
  settled_at: number | null;
}

export interface PromptsTable {
  root_id: string;
  id: string;
  run_id: string;
  stage_key: string;
  question: string;
  choices: string | null;
  state: string;
  answer: string | null;
  answered_by: string | null;
  deadline: number | null;
  created_at: number;
  answered_at: number | null;
}

export interface RunTagsTable {
  run_id: string;
  key: string;
  value: string;
  set_at: number;
}

export interface JournalTables {
  meta: MetaTable;
  run_tags: RunTagsTable;
  runs: RunsTable;
  events: EventsTable;
  leases: LeasesTable;
  work_items: WorkItemsTable;
  stage_index: StageIndexTable;
  messages: MessagesTable;
  deliveries: DeliveriesTable;
  prompts: PromptsTable;
}

/** `undefined` ↔ SQL NULL; anything else as JSON text. Throws on values JSON cannot hold. */
export function toJson(value: unknown): string | null {
  if (value === undefined) return null;
  const text = JSON.stringify(value);
  // JSON.stringify returns undefined for functions and symbols: refuse rather than lose them.
  if (text === undefined) throw new TypeError(`cannot store a ${typeof value} in the journal`);
  return text;
}

export function fromJson(text: string | null): unknown {
  return text === null ? undefined : JSON.parse(text);
}

export function runFromRow(row: RunsTable): RunRecord {
  return {
    id: row.id as RunId,
    rootId: row.root_id as RunId,
    parentId: row.parent_id as RunId | null,
    parentKey: row.parent_key,
    depth: row.depth,
    workflowName: row.workflow_name,
    workflowPath: row.workflow_path,
    workflowDigest: row.workflow_digest,
    inputs: fromJson(row.inputs),
    status: row.status as RunStatus,
    outputs: fromJson(row.outputs),
    error: row.error === null ? null : (JSON.parse(row.error) as ErrorInfo),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    endedAt: row.ended_at,
    lastSeq: row.last_seq,
    control: row.control,
    controlRev: row.control_rev,
    controlAck: row.control_ack,
    origin: row.origin as StartOrigin | null,
    recovered: Number(row.recovered) === 1,
  };
}

export function eventFromRow(row: EventsTable): JournalEvent {
  return {
    runId: row.run_id as RunId,
    seq: row.seq,
    type: row.type,
    key: row.key,
    idempotencyKey: row.idempotency_key,
    payload: fromJson(row.payload),
    at: row.at,
  };
}

export function leaseFromRow(row: LeasesTable): Lease {
  return {
    rootId: row.run_id as RunId,
    holderId: row.holder_id as HolderId,
    host: row.host,
    pid: row.pid,
    pidStart: row.pid_start,
    epoch: row.epoch,
    renewedAt: row.renewed_at,
    timeoutMs: row.timeout_ms,
  };
}

export function workFromRow(row: WorkItemsTable): WorkItem {
  return {
    id: row.id,
    rootId: row.root_id as RunId,
    runId: row.run_id as RunId,
    rootEpoch: row.root_epoch,
    stageKey: row.stage_key,
    attempt: row.attempt,
    descriptor: JSON.parse(row.descriptor) as unknown,
    state: row.state as WorkState,
    generation: row.generation,
    workerId: row.worker_id,
    epoch: row.epoch,
    leaseExpiresAt: row.lease_expires_at,
    readyAt: row.ready_at,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    result: fromJson(row.result),
    error: row.error === null ? null : (JSON.parse(row.error) as ErrorInfo),
  };
}

export function stageFromRow(row: StageIndexTable): StageRow {
  return {
    rootId: row.root_id as RunId,
    runId: row.run_id as RunId,
    key: row.stage_key,
    path: row.path,
    name: row.name,
    kind: row.kind as StageRow["kind"],
    state: row.state as StageState,
    attempt: row.attempt,
    ...(row.child_run_id ? { childRunId: row.child_run_id } : {}),
    updatedAt: row.updated_at,
  };
}

export function messageFromRow(row: MessagesTable): MessageRecord {
  return {
    rootId: row.root_id as RunId,
    id: row.id,
    target: row.target,
    text: row.text,
    mode: row.mode as MessageMode,
    sticky: row.sticky === 1,
    sender: row.sender,
    createdAt: row.created_at,
  };
}

export function deliveryFromRow(row: DeliveriesTable): DeliveryRecord {
  return {
    seq: row.seq,
    rootId: row.root_id as RunId,
    messageId: row.message_id,
    stagePath: row.stage_path,
    runId: row.run_id as RunId | null,
    stageKey: row.stage_key,
    state: row.state as DeliveryState,
    attempt: row.attempt,
    reason: row.reason,
    createdAt: row.created_at,
    settledAt: row.settled_at,
  };
}

export function promptFromRow(row: PromptsTable): PromptRecord {
  return {
    rootId: row.root_id as RunId,
    id: row.id,
    runId: row.run_id as RunId,
    stageKey: row.stage_key,
    question: row.question,
    choices: row.choices === null ? null : (JSON.parse(row.choices) as string[]),
    state: row.state as PromptState,
    answer: row.answer,
    answeredBy: row.answered_by,
    deadline: row.deadline,
    createdAt: row.created_at,
    answeredAt: row.answered_at,
  };
}
