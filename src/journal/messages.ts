/**
 * The durable side of intercom (`Journal.messages`; docs/design/intercom.md):
 * messages to stages and prompts to humans (./prompts.ts), addressed
 * through the stage index (./stage-index.ts).
 *
 * Messages: one row per sent message (id unique per root run, with a digest
 * of what was sent so a reused id with other content is refused). A
 * message has one delivery per stage it goes to; its states (queued,
 * delivered, received, receipt-unverified, session-replaced,
 * stage-terminal, undeliverable) and their moves are ./delivery-states.ts. A queued delivery is either bound to a stage that has
 * started (run id + stage key) or waits for the first stage with its path
 * to start. A sticky message also reaches every stage that starts later and
 * matches its pattern (its deliveries are made when those stages start).
 * At most MAX_QUEUED_PER_STAGE queued deliveries per stage path.
 *
 * Writers: senders (any process) enqueue and answer prompts without a
 * lease; everything the run's driver does (claiming at stage start,
 * settling live deliveries, closing prompts) is fenced by its lease and
 * journaled as events of the run in the same transaction.
 */

import type { RunId } from "../shared/ids.ts";
import type { AppendEntry } from "./append.ts";
import type { PromptRecord, PromptState } from "./prompts.ts";
import type { Lease, RunRecord } from "./runs.ts";
import type { StageRow } from "./stage-index.ts";

export const MAX_QUEUED_PER_STAGE = 50;
export const MAX_STICKY_PER_RUN = 50;
/** Longest message text or answer, in UTF-16 code units. */
export const MAX_MESSAGE_TEXT = 64 * 1024;

export const MESSAGE_MODES = ["steer", "followUp", "interrupt"] as const;
export type MessageMode = (typeof MESSAGE_MODES)[number];

export { DELIVERY_STATES, type DeliveryState } from "./delivery-states.ts";
import type { DeliveryState } from "./delivery-states.ts";

export interface MessageRecord {
  rootId: RunId;
  id: string;
  /** The stage path or pattern it was sent to. */
  target: string;
  text: string;
  mode: MessageMode;
  sticky: boolean;
  /** Who sent it ("cli", "status-page", "<run id>:<stage path>", ...). */
  sender: string;
  createdAt: number;
}

export interface DeliveryRecord {
  /** Increases with every delivery made: the order a stage receives its messages in. */
  seq: number;
  rootId: RunId;
  messageId: string;
  stagePath: string;
  /** Set once bound to a started stage. */
  runId: RunId | null;
  stageKey: string | null;
  state: DeliveryState;
  /** The stage attempt it was delivered to. */
  attempt: number | null;
  reason: string | null;
  createdAt: number;
  settledAt: number | null;
}

/** A message as a stage receives it. */
export interface StageMail {
  deliverySeq: number;
  messageId: string;
  text: string;
  mode: MessageMode;
  sender: string;
  /** Delivered by this claim (false: delivered to an earlier attempt of the stage, handed again to a fresh one). */
  fresh: boolean;
}

/** A queued delivery bound to a started stage, with what to deliver. */
export interface LiveDelivery extends DeliveryRecord {
  runId: RunId;
  stageKey: string;
  text: string;
  mode: MessageMode;
  sender: string;
}

export interface StageAttempt {
  runId: RunId;
  stageKey: string;
  path: string;
  name: string;
  attempt: number;
}

export interface NewMessage {
  rootId: RunId;
  id: string;
  target: string;
  text: string;
  mode: MessageMode;
  sticky: boolean;
  sender: string;
  /** Which stage rows the planner is shown: these exact paths, and every stage whose path starts with `prefix`. */
  lookup: { paths?: string[]; prefix?: string };
}

/** Where one message goes: a started stage (run + key) or the next stage to start with this path. */
export interface PlannedDelivery {
  stagePath: string;
  runId?: RunId;
  stageKey?: string;
}

/**
 * Decides a message's deliveries from the root run and the stage rows
 * `lookup` selected, read in the enqueue transaction (so no stage can start
 * in between). Throws (an AtomicError) to refuse the message.
 */
export type MessagePlanner = (seen: { root: RunRecord | undefined; stages: StageRow[] }) => PlannedDelivery[];

export interface EnqueueResult {
  /** "exists": a message with this id and the same content was sent before (nothing new written). */
  status: "queued" | "exists";
  message: MessageRecord;
  deliveries: DeliveryRecord[];
}

export interface MessageStore {
  // ---- senders (no lease)
  /**
   * Records a message and its deliveries in one transaction: a message id
   * seen before with the same content returns "exists"; with other content
   * it is refused (message_id_conflict); a stage path that would hold more
   * than MAX_QUEUED_PER_STAGE queued deliveries is refused (queue_full); a
   * sticky message beyond MAX_STICKY_PER_RUN is refused (sticky_limit).
   */
  enqueue(message: NewMessage, plan: MessagePlanner): Promise<EnqueueResult>;
  /** Answers an open prompt; the same answer again returns "exists"; anything else on a closed prompt is refused. */
  answerPrompt(rootId: RunId, promptId: string, answer: string, by: string): Promise<{ status: "answered" | "exists"; prompt: PromptRecord }>;

  // ---- the run's driver (fenced by its lease)
  /**
   * A stage attempt is about to start: records it running in the stage
   * index, binds and delivers its queued messages (by path or bound to
   * it), makes and delivers the deliveries of matching sticky messages, and
   * appends `event(fresh)` when anything was delivered — one transaction.
   * Returns every message handed to this stage so far, in delivery order:
   * a fresh attempt receives its predecessors' messages too, and their
   * deliveries become session-replaced (the reason names both attempts).
   */
  claimForStage(
    lease: Lease,
    stage: StageAttempt,
    matches: (pattern: string) => boolean,
    event: (fresh: StageMail[]) => AppendEntry | undefined,
  ): Promise<StageMail[]>;
  /**
   * A stage attempt already started (its start record committed) without a
   * claim: binds queued messages for its path, and matching sticky ones, to
   * it as queued deliveries (delivered live). Returns how many.
   */
  bindForStage(lease: Lease, stage: StageAttempt, matches: (pattern: string) => boolean): Promise<number>;
  /**
   * Settles queued deliveries (only those still queued change) and appends
   * `events`, in one transaction. Returns the seqs that changed.
   */
  settle(
    lease: Lease,
    changes: { seq: number; state: "delivered" | "stage-terminal" | "undeliverable"; attempt?: number; reason?: string }[],
    events: (changed: number[]) => AppendEntry[],
  ): Promise<number[]>;
  /**
   * `confirm`: the attempt's runner reports that a model request carried
   * these messages: their deliveries to it become received. Returns the ids
   * that changed.
   * `endAttempt`: a stage attempt ended: what was handed to it and is still only
   * delivered becomes receipt-unverified with `reason` (its runner could
   * not confirm the model saw it). Returns the message ids that changed.
   */
  confirm(lease: Lease, stage: { runId: RunId; stageKey: string; attempt: number }, messageIds: string[]): Promise<string[]>;
  endAttempt(lease: Lease, stage: { runId: RunId; stageKey: string; attempt: number }, reason: string): Promise<string[]>;
  /** Every queued delivery of the root (under `pathPrefix` if given) becomes undeliverable with `reason`. Returns how many. */
  settleAll(lease: Lease, rootId: RunId, reason: string, pathPrefix?: string): Promise<number>;
  /** Closes an open prompt as timed out; returns the prompt as it is after (answered, if an answer won the race). */
  timeOutPrompt(lease: Lease, rootId: RunId, promptId: string): Promise<PromptRecord | undefined>;

  // ---- reads
  /** True when any message was ever sent to this root run (cheap; lets a driver skip message work). */
  hasMail(rootId: RunId): Promise<boolean>;
  /** Queued deliveries bound to started stages of the root, oldest first. */
  liveQueued(rootId: RunId): Promise<LiveDelivery[]>;
  stages(rootId: RunId): Promise<StageRow[]>;
  messagesOf(rootId: RunId): Promise<{ messages: MessageRecord[]; deliveries: DeliveryRecord[] }>;
  getPrompt(rootId: RunId, promptId: string): Promise<PromptRecord | undefined>;
  prompts(rootId: RunId, state?: PromptState): Promise<PromptRecord[]>;
}
