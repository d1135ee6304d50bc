/**
 * Live delivery of queued messages to a run tree's running stages.
 *
 * - `live` holds the stage attempts that run now (tree-mail.ts adds one
 *   when its start is recorded and removes it when it ends).
 * - A pass (`pump`) reads the journal's queued deliveries of the tree and
 *   hands each whose stage runs to the executor (`deliver`), in order, then
 *   records the outcomes in one fenced settle: delivered, or stage-terminal
 *   when the stage has finished for good. A delivery whose stage stopped or
 *   failed stays queued for the stage's next attempt; one the executor
 *   could not take is retried at the next pass.
 * - Passes are coalesced: one at a time; asked for while one runs, one more
 *   follows it.
 * - Most trees never see mail: until the journal says the tree has any
 *   (`mailSeen`), a pass is one cheap read, and `anyMail` answers every
 *   stage starting in the same event-loop turn with one read.
 */

import type { LiveDelivery } from "../../journal/messages.ts";
import { LeaseLostError } from "../../shared/errors.ts";
import type { RunId } from "../../shared/ids.ts";
import { EVENT } from "../journal-events.ts";
import type { MailTree } from "./mail-tree.ts";

export interface LiveStage {
  runId: RunId;
  stageKey: string;
  path: string;
  name: string;
  attempt: number;
}

type Change = { seq: number; state: "delivered" | "stage-terminal"; attempt?: number; reason?: string };

export function stageId(runId: string, stageKey: string): string {
  return `${runId}\u0000${stageKey}`;
}

export class DeliveryPump {
  private readonly live = new Map<string, LiveStage>();
  private pumping: Promise<void> | undefined;
  private pumpAgain = false;
  /** Who waits for the end of the next pass (`nextPass`). */
  private passWaiters: (() => void)[] = [];
  /** Whether the journal has shown this tree any mail (from then on every pass reads the queue). */
  mailSeen = false;
  /** This turn's answer of anyMail(). */
  private mailCheck: Promise<boolean> | undefined;
  private closed = false;

  constructor(private readonly tree: MailTree) {}

  private get rootId(): RunId {
    return this.tree.lease.rootId;
  }

  get hasLive(): boolean {
    return this.live.size > 0;
  }

  stageRunning(stage: LiveStage): void {
    this.live.set(stageId(stage.runId, stage.stageKey), stage);
  }

  /** The running attempt of this stage, if it is live. */
  liveStage(runId: RunId, stageKey: string): LiveStage | undefined {
    return this.live.get(stageId(runId, stageKey));
  }

  /** The attempt ended: no more live delivery to it. Returns it (undefined if it was not live). */
  stageEnded(runId: RunId, stageKey: string): LiveStage | undefined {
    const stage = this.live.get(stageId(runId, stageKey));
    this.live.delete(stageId(runId, stageKey));
    return stage;
  }

  /** Deliver what is queued for running stages now (coalesced: one pass at a time, another if asked meanwhile). */
  pump(): Promise<void> {
    if (this.pumping) {
      this.pumpAgain = true;
      return this.pumping;
    }
    this.pumping = (async () => {
      try {
        do {
          this.pumpAgain = false;
          await this.pumpOnce();
        } while (this.pumpAgain && !this.closed);
      } finally {
        this.pumping = undefined;
        for (const resolve of this.passWaiters.splice(0)) resolve();
      }
    })();
    return this.pumping;
  }

  /** Resolves when the next pass (or the one running) has ended: a delivery it made is recorded by then. */
  nextPass(): Promise<void> {
    return new Promise((resolve) => this.passWaiters.push(resolve));
  }

  kick(): void {
    void this.pump().catch(() => {});
  }

  /**
   * Whether this tree has any mail at all, for a stage starting now. One
   * answer serves every stage that asks in the same event-loop turn: the
   * stages of a fan-out ask once, not twice each. Mail sent meanwhile
   * reaches them live, through the next poll (`pumpOnce` always asks).
   */
  anyMail(): Promise<boolean> {
    if (this.mailSeen) return Promise.resolve(true);
    if (!this.mailCheck) {
      this.mailCheck = this.tree.journal.messages.hasMail(this.rootId).then((seen) => {
        if (seen) this.mailSeen = true;
        return seen;
      });
      setImmediate(() => {
        this.mailCheck = undefined;
      });
    }
    return this.mailCheck;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.pumping?.catch(() => {});
    for (const resolve of this.passWaiters.splice(0)) resolve();
  }

  private async pumpOnce(): Promise<void> {
    const { journal, lease, executor } = this.tree;
    if (!this.mailSeen) {
      this.mailSeen = await journal.messages.hasMail(this.rootId);
      if (!this.mailSeen) return;
    }
    const queued = await journal.messages.liveQueued(this.rootId);
    if (queued.length === 0) return;
    const changes: Change[] = [];
    const byseq = new Map<number, LiveDelivery>();
    const finished = await this.finishedStages(queued);
    for (const d of queued) {
      byseq.set(d.seq, d);
      const stage = this.live.get(stageId(d.runId, d.stageKey));
      if (!stage) {
        if (finished.has(stageId(d.runId, d.stageKey))) changes.push({ seq: d.seq, state: "stage-terminal", reason: `stage ${d.stagePath} finished before the message arrived` });
        continue; // stopped or failed: its next attempt receives it
      }
      if (!executor.deliver) continue;
      let outcome: "delivered" | "not_running";
      try {
        outcome = await executor.deliver({ runId: d.runId, stageKey: d.stageKey }, { id: d.messageId, text: d.text }, d.mode);
      } catch {
        continue; // retried at the next poll
      }
      if (outcome === "delivered") changes.push({ seq: d.seq, state: "delivered", attempt: stage.attempt });
    }
    if (changes.length === 0) return;
    const bySeqChange = new Map(changes.map((c) => [c.seq, c]));
    try {
      await journal.messages.settle(lease, changes, (changed) =>
        changed.map((seq) => {
          const d = byseq.get(seq)!;
          const c = bySeqChange.get(seq)!;
          return c.state === "delivered"
            ? { runId: d.runId, type: EVENT.messageDelivered, payload: { stageKey: d.stageKey, messageId: d.messageId, stagePath: d.stagePath, attempt: c.attempt, mode: d.mode } }
            : { runId: d.runId, type: EVENT.messageUndeliverable, payload: { stageKey: d.stageKey, messageId: d.messageId, stagePath: d.stagePath, reason: c.reason } };
        }),
      );
    } catch (err) {
      if (err instanceof LeaseLostError) this.tree.stop("lease_lost");
      return;
    }
    for (const c of changes) {
      const d = byseq.get(c.seq)!;
      this.tree.observer({ type: "message", runId: d.runId, position: d.stageKey, stage: d.stagePath, messageId: d.messageId, state: c.state, live: true, at: Date.now(), ...(c.reason ? { reason: c.reason } : {}) });
    }
  }

  /** Which of the deliveries' stages have finished (checkpointed), from the stage index. */
  private async finishedStages(queued: LiveDelivery[]): Promise<Set<string>> {
    const notLive = queued.filter((d) => !this.live.has(stageId(d.runId, d.stageKey)));
    if (notLive.length === 0) return new Set();
    const rows = await this.tree.journal.messages.stages(this.rootId);
    return new Set(rows.filter((r) => r.state === "finished").map((r) => stageId(r.runId, r.key)));
  }
}
