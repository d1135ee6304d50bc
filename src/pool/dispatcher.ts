/**
 * Dispatch: handing the oldest ready items to idle workers, committing the
 * results workers send back, and settling items the root cancelled before
 * a worker ran them.
 *
 * - While not paused, each idle worker gets the oldest ready item (one
 *   fenced claim transaction for all of them), sent as `start` once that
 *   transaction has committed; after a worker's commit, its next item is
 *   claimed in the same transaction and its `start` carries that commit's
 *   receipt.
 * - A worker's `complete` is committed fenced by (worker, generation,
 *   epoch) and its operation id: a stale or conflicting commit is refused
 *   and logged; a retry of one already answered gets the same receipt. The
 *   root gets `work_done` once, for the commit that settled the item.
 * - The root is answered once per item (root-channel.ts remembers which),
 *   even when handing out the next item fails after a commit; a root that
 *   heard nothing of an item for a while asks (`work_status`) and status()
 *   answers from the queue, giving back a leased item that nobody runs.
 * - Cancel settlement: an item the root cancelled that no worker runs is
 *   taken off the queue under the coordinator's own id and settled as
 *   cancelled; one a claim holds at that moment is settled when its claim
 *   comes back (give()).
 * - Budgets (a run's own pool only; StageRequest.budgeted): once the result
 *   of an item of a run with a cost or token budget is committed, nothing
 *   more is claimed (not in that commit, not by dispatch) until the root
 *   has counted it (`budgetCounted`); a root whose budget ran out says so
 *   and nothing of the drive is claimed any more. So no stage starts after
 *   the result that used the budget up; what overshoots is what was
 *   running then (docs/guides/durability.md). A result the root never
 *   counts (its commit failed and is sent again, say) holds claims at most
 *   BUDGET_HOLD_MS.
 * - Three claim transactions failing in a row (the journal refuses writes)
 *   make the pool fail with storage_unavailable rather than spin; after one
 *   or two, the claim is tried again after a short wait.
 */

import { join } from "node:path";
import type { WorkCommit, WorkCommitted, WorkItem } from "../journal/work-queue.ts";
import { STDOUT_LOG } from "../artifacts/stage-logs.ts";
import type { StageRequest } from "../runners/types.ts";
import type { StageResult } from "../sdk/types.ts";
import { ensureError } from "../shared/errors.ts";
import { faultPoint } from "../shared/fault-points.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";
import type { CoordinatorCore, WorkDispatch } from "./coordinator-core.ts";
import type { FromWorker, Receipt } from "./protocol/coordinator-worker.ts";
import { trace, traceNow, tracing } from "./trace.ts";
import type { WorkerSlot } from "./worker-slot.ts";

type CompleteMessage = Extract<FromWorker, { type: "complete" }>;

const MAX_CLAIM_FAILURES = 3;
/** The wait before claiming again after a failed claim: 200 ms, then 400 (a third failure ends the pool). */
const CLAIM_BACKOFF: Backoff = { firstMs: 200, maxMs: 400 };
/** The longest claims wait for the root to count a budgeted result (it answers in milliseconds; this only ends a wait nobody will end). */
const BUDGET_HOLD_MS = 10_000;
/** The worker id under which the coordinator itself takes a cancelled item off the queue. */
const SETTLER_ID = "coordinator";

export class Dispatcher implements WorkDispatch {
  /** Items the root cancelled that no worker runs: settled as cancelled at once if queued, else when their claim comes back. */
  private readonly cancelled = new Set<string>();
  private dispatching = false;
  private redispatch = false;
  /** Claim transactions failed in a row. */
  private claimFailures = 0;
  /** Workers' results heard this turn, committed together at its end (commitHeard). */
  private heard: { slot: WorkerSlot; msg: CompleteMessage; done: () => void }[] = [];

  /** Budgeted items whose committed results the root has not counted yet, with when they were committed. */
  private readonly uncounted = new Map<string, number>();
  /** The root's budget ran out: nothing more of the drive is claimed. */
  private budgetSpent = false;

  constructor(private readonly core: CoordinatorCore) {}

  /** Whether claims wait for the root's budget (see the file note). */
  private claimsHeld(): boolean {
    if (this.budgetSpent) return true;
    const now = Date.now();
    for (const [id, at] of this.uncounted) {
      if (now - at < BUDGET_HOLD_MS) return true;
      this.uncounted.delete(id);
      this.core.log(`the root never counted the budgeted result of ${id}: claiming again`);
    }
    return false;
  }

  budgetCounted(workId: string | undefined, exhausted: boolean): void {
    if (exhausted) this.budgetSpent = true;
    if (workId) this.uncounted.delete(workId);
    if (!this.claimsHeld()) void this.dispatch();
  }

  /** A result of a budgeted item is about to be committed: claims wait until the root counted it. */
  private holdForBudget(slot: WorkerSlot, msg: CompleteMessage): void {
    if (this.core.hostId !== undefined || !slot.owns(msg.ref)) return; // worker hosts serve many roots, none of which counts here
    if ((slot.item?.descriptor as StageRequest | undefined)?.budgeted !== true) return;
    this.uncounted.set(msg.ref.workId, Date.now());
    setTimeout(() => void (this.core.shuttingDown ? undefined : this.dispatch()), BUDGET_HOLD_MS + 10).unref();
  }

  async dispatch(): Promise<void> {
    if (!this.core.attached) return; // the coordinator dispatches once the journal is open
    if (this.dispatching) {
      this.redispatch = true;
      return;
    }
    const { journal, config, claimScope, workers } = this.core;
    this.dispatching = true;
    try {
      do {
        this.redispatch = false;
        for (;;) {
          if (this.core.paused || this.claimsHeld()) break;
          const idle = workers.idle();
          if (idle.length === 0) break;
          // Every idle worker gets an item from one transaction; the starts go out after it commits (give()).
          const claimAt = tracing ? traceNow() : 0;
          faultPoint("coordinator-before-claim");
          const items = await journal.work.claimMany(
            idle.map((s) => s.id),
            config.leaseMs,
            claimScope,
          );
          this.claimFailures = 0;
          for (const item of items) trace("claim", item.id, claimAt);
          if (items.length > 0) faultPoint("coordinator-after-claim");
          for (let i = 0; i < items.length; i++) await this.give(idle[i]!, items[i]!);
          if (items.length < idle.length) break; // nothing more is ready
        }
      } while (this.redispatch);
    } catch (err) {
      const why = ensureError(err).message;
      this.core.log(`dispatch failed: ${why}`);
      if (this.core.storageFailed(err)) return;
      // Whatever fails three claims in a row (the journal refuses writes) would fail every one after: the
      // run stops resumably rather than wait for ever.
      if (++this.claimFailures >= MAX_CLAIM_FAILURES) this.core.fatal("storage_unavailable", `the pool cannot claim work: ${why}`);
      // A failed claim leaves nothing that would dispatch again (nothing committed): try again shortly, so a passing fault neither stalls the pool for good nor
      // escapes the three-failures limit.
      else setTimeout(() => void (this.core.shuttingDown ? undefined : this.dispatch()), backoffDelay(CLAIM_BACKOFF, this.claimFailures - 1)).unref();
    } finally {
      this.dispatching = false;
    }
  }

  /**
   * A worker's result: committed (fenced), then the worker gets its next
   * item, then the root is told. The root is told exactly once per item
   * whatever happens after the commit: handing out the next item may fail
   * (the item stays leased until the root's work_status finds it), and a
   * retry of a commit that committed before answers the root if the first
   * try could not.
   *
   * The results heard in one turn of the event loop are committed together
   * at its end, in one transaction where the journal's are synchronous
   * (WorkQueue.completeMany): with four workers on short stages, about a
   * third of the turns bring two or more (measured: 500 results in about 350
   * turns), and each transaction saved is a write lock the root does not
   * wait for; the root then hears of them in one work_done too
   * (root-channel.ts), and records them in one commit. A worker host commits
   * each result on its own: it flushes its link to the roots first and keeps
   * in its outbox what the journal refuses (fleet/host.ts).
   */
  complete(slot: WorkerSlot, msg: CompleteMessage): Promise<void> {
    trace("complete", msg.ref.workId);
    // A run's own pool on a shared journal: a host on another machine may continue the stage, so its session goes first.
    const shipping = slot.owns(msg.ref) && slot.item ? this.core.shipSession?.(slot.item) : undefined;
    return shipping ? shipping.then(() => this.commit(slot, msg)) : this.commit(slot, msg);
  }

  private commit(slot: WorkerSlot, msg: CompleteMessage): Promise<void> {
    if (this.core.beforeCommit || this.core.keepUncommitted) return this.commitAlone(slot, msg);
    return new Promise<void>((done) => {
      if (this.heard.push({ slot, msg, done }) === 1) setImmediate(() => void this.commitHeard());
    });
  }

  /** What committing `msg` asks of the queue: its fence, outcome and operation, and the worker's next item if it is still the worker's to run one. */
  private commitOf(slot: WorkerSlot, msg: CompleteMessage): WorkCommit {
    const { config, claimScope } = this.core;
    const result = msg.result as StageResult;
    this.holdForBudget(slot, msg);
    return {
      fence: { id: msg.ref.workId, workerId: slot.id, generation: msg.ref.generation, epoch: msg.ref.epoch },
      outcome: { state: result.status === "completed" ? "completed" : "failed", result },
      op: { id: msg.opId, digest: String(Bun.hash(JSON.stringify(result))) },
      // The worker is free once this commits: its next item is leased in the same transaction (one per stage, not two).
      ...(slot.owns(msg.ref) && !this.core.paused && !this.claimsHeld() ? { claimNext: { leaseMs: config.leaseMs, root: claimScope } } : {}),
    };
  }

  private async commitHeard(): Promise<void> {
    const heard = this.heard;
    this.heard = [];
    const commits = heard.map(({ slot, msg }) => this.commitOf(slot, msg));
    let committed: WorkCommitted[];
    try {
      const claimAt = tracing ? traceNow() : 0;
      for (let i = 0; i < commits.length; i++) faultPoint("coordinator-before-commit");
      committed = await this.core.journal.work.completeMany(commits);
      for (const [i, { fence }] of commits.entries()) {
        trace("committed", fence.id);
        const next = committed[i]!.next;
        if (!next) continue;
        trace("claim", next.id, claimAt);
        faultPoint("coordinator-after-claim");
      }
    } catch (err) {
      for (const { slot, msg, done } of heard) {
        this.core.log(`commit from ${slot.id} for work ${msg.ref.workId} not recorded: ${ensureError(err).message}`);
        done();
      }
      // Nothing committed: each worker sends its result again (same operation id) when no receipt comes.
      this.core.storageFailed(err);
      return;
    }
    for (const [i, { slot, msg, done }] of heard.entries()) {
      await this.afterCommit(slot, msg, commits[i]!, committed[i]!);
      done();
    }
  }

  /** A worker host's commit: alone, after flushing its link, and kept in its outbox if the journal refuses it. */
  private async commitAlone(slot: WorkerSlot, heard: CompleteMessage): Promise<void> {
    const { journal } = this.core;
    const msg = this.core.finish && slot.owns(heard.ref) ? { ...heard, result: await this.core.finish(heard.ref.workId, heard.result as StageResult) } : heard;
    const commit = this.commitOf(slot, msg);
    const { fence, outcome, op } = commit;
    let committed: WorkCommitted;
    if (this.core.beforeCommit && slot.owns(msg.ref)) await this.core.beforeCommit(fence.id);
    try {
      const claimAt = tracing ? traceNow() : 0;
      faultPoint("coordinator-before-commit");
      [committed] = (await journal.work.completeMany([commit])) as [WorkCommitted];
      trace("committed", fence.id);
      if (committed.next) {
        trace("claim", committed.next.id, claimAt);
        faultPoint("coordinator-after-claim");
      }
    } catch (err) {
      this.core.log(`commit from ${slot.id} for work ${fence.id} not recorded: ${ensureError(err).message}`);
      // A worker host keeps it in its outbox (committed once the journal is back): the worker is free.
      if (slot.owns(msg.ref) && slot.item && this.core.keepUncommitted?.(slot.item, fence, outcome, op)) {
        slot.finish();
        slot.send({ type: "receipt", opId: msg.opId, status: "committed" });
        return;
      }
      // Nothing committed: the worker sends it again (same operation id) when no receipt comes.
      this.core.storageFailed(err);
      return;
    }
    await this.afterCommit(slot, msg, commit, committed);
  }

  /** After the commit: the worker's receipt (on its next item's start, if it got one), then the root's work_done. */
  private async afterCommit(slot: WorkerSlot, msg: CompleteMessage, { fence }: WorkCommit, { receipt, next }: WorkCommitted): Promise<void> {
    const owned = receipt.status === "committed" && slot.owns(msg.ref);
    const answer = { opId: msg.opId, status: receipt.status };
    if (owned) slot.finish();
    try {
      // The next stage first, with the receipt riding on it: it is what keeps the worker busy. Not
      // ours to run after all (the slot moved on meanwhile): settled or handed back by give().
      const carried = next ? await this.give(slot, next, answer) : false;
      if (!carried) slot.send({ type: "receipt", ...answer });
      if (receipt.status !== "committed") {
        this.core.log(
          `refused ${receipt.status === "stale" ? "a stale" : "a conflicting"} commit from worker ${slot.id} for work ${fence.id} ` +
            `(generation ${fence.generation}, epoch ${fence.epoch}${receipt.status === "stale" && receipt.item ? `; the item is at generation ${receipt.item.generation}, epoch ${receipt.item.epoch}, ${receipt.item.state}` : ""})`,
        );
        return;
      }
      faultPoint("coordinator-before-work-done");
    } catch (err) {
      this.core.log(`after committing work ${fence.id}: ${ensureError(err).message}`);
      if (receipt.status !== "committed") return;
      if (!owned) return; // a retry: the first try answers (or the root asks)
      slot.send({ type: "receipt", ...answer }); // harmless if it was carried: the worker ignores a second receipt
      return; // the root's work_status finds the item settled and gets its result then
    }
    // Once per item: a retry of a commit already answered sends nothing again (root-channel.ts).
    this.core.root.done(fence.id, { ...(msg.result as StageResult), workerId: slot.id, generation: fence.generation });
    if (slot.state === "idle") void this.dispatch();
  }

  /**
   * The root heard nothing of `workId` for a while and asks where it is:
   * answered from the workers and the queue. A settled item's result is
   * sent if it never was (a failure after its commit); a leased item that no worker here holds and whose lease
   * ran out (its hand-out failed half way) is given back like a lost
   * worker's; no answer at all (the journal failed) makes the root ask
   * again.
   */
  async status(workId: string): Promise<void> {
    const { root, workers, journal, config } = this.core;
    const answer = (state: "running" | "queued" | "done" | "gone") => root.send({ type: "work_status", workId, state });
    if (workers.running(workId)) return answer("running");
    if (!this.core.attached) return answer("queued"); // the journal is being opened: dispatch follows
    try {
      const item = await journal.work.get(workId);
      if (!item || item.state === "abandoned") return answer("gone");
      if (item.state === "ready") {
        void this.dispatch();
        return answer("queued");
      }
      if (item.state === "leased") {
        if (workers.running(workId) || (item.leaseExpiresAt ?? 0) > Date.now()) return answer("running"); // held, or a hand-out in flight
        const fence = { id: item.id, workerId: item.workerId ?? "", generation: item.generation, epoch: item.epoch };
        const receipt = await journal.work.release(fence, config.maxGenerations, {
          name: "WorkerLost",
          code: "worker_lost",
          message: `work ${item.id} was leased to ${item.workerId}, which does not run it`,
        });
        this.core.log(`work ${item.id} was leased to ${item.workerId} but nobody ran it; released`);
        if (receipt.status !== "committed" || receipt.item.state !== "failed") {
          void this.dispatch();
          return answer("queued");
        }
        root.done(workId, resultOf(receipt.item));
        return answer("done");
      }
      root.done(workId, resultOf(item)); // sent now unless it was sent before (then the root has it already)
      return answer("done");
    } catch (err) {
      this.core.log(`could not look up work ${workId} for the root: ${ensureError(err).message}`);
    }
  }

  /**
   * Starts a claimed item on `slot` (the start message carries `receipt`
   * when given); one cancelled meanwhile is settled, and one whose worker
   * went away is handed back. True when the start message was sent.
   */
  private async give(slot: WorkerSlot, item: WorkItem, receipt?: Receipt): Promise<boolean> {
    // A worker host reads what the item's run recorded once per run (its environment); nothing to wait for after.
    const reading = this.core.prepare?.(item);
    if (reading) await reading;
    if (this.startIfFree(slot, item, receipt)) return true;
    if (this.cancelled.delete(item.id)) {
      await this.settleCancelled(slot.id, item);
      return false;
    }
    // The worker went away while the claim was in flight: its item moves on to the next generation.
    await this.core.journal.work.release(
      { id: item.id, workerId: slot.id, generation: item.generation, epoch: item.epoch },
      this.core.config.maxGenerations,
      { name: "WorkerLost", code: "worker_lost", message: `worker ${slot.id} went away as it was given the item` },
    );
    void this.dispatch();
    return false;
  }

  /**
   * Sends `start` for a claimed item, unless the root cancelled it or
   * `slot` is no longer idle (give() settles those). True when sent.
   */
  private startIfFree(slot: WorkerSlot, item: WorkItem, receipt?: Receipt): boolean {
    if (slot.state !== "idle" || this.cancelled.has(item.id)) return false;
    trace("claimed", item.id);
    const local = this.core.localize ? this.core.localize(item) : (item.descriptor as StageRequest);
    if ("refused" in local) {
      // It cannot run here (its cwd does not exist on this host): it fails with that sentence, and the slot stays free.
      void this.settleFailed(slot.id, item, { code: local.code ?? "bad_cwd", message: local.refused }).finally(() => void this.dispatch());
      return true;
    }
    slot.assign(item, performance.now(), this.core.stall.stalledMs);
    const request = local;
    slot.send({ type: "start", workId: item.id, generation: item.generation, epoch: item.epoch, request, ...(receipt ? { receipt } : {}) });
    return true;
  }

  /** The root cancelled `workId` and no worker runs it: settled now if queued, else when its claim comes back. */
  cancelQueued(workId: string): void {
    this.cancelled.add(workId);
    void this.settleCancelledQueued();
  }

  /**
   * Items the root cancelled that no worker runs: each one still queued is
   * taken off the queue and settled now, paused or not, without a worker.
   * One that is not (a claim holds it) is settled by give() when its claim
   * comes back.
   */
  async settleCancelledQueued(): Promise<void> {
    if (!this.core.attached) return; // the coordinator calls this once the journal is open
    const { journal, config } = this.core;
    for (const id of this.cancelled) {
      try {
        const item = await journal.work.claimItem(id, SETTLER_ID, config.leaseMs);
        if (item) {
          this.cancelled.delete(id);
          await this.settleCancelled(SETTLER_ID, item);
        } else if ((await journal.work.get(id))?.state !== "leased") {
          this.cancelled.delete(id); // already settled (its result crossed the cancel)
        }
      } catch (err) {
        this.core.log(`could not settle cancelled work ${id}: ${ensureError(err).message}`);
      }
    }
  }

  private async settleCancelled(workerId: string, item: WorkItem): Promise<void> {
    await this.settleFailed(workerId, item, { code: "cancelled", message: "cancelled before it started" }, "cancelled");
  }

  /** Settles a claimed item that no worker runs (cancelled, or refused here) with `error`, and tells the root. */
  private async settleFailed(workerId: string, item: WorkItem, error: { code: string; message: string }, status: "failed" | "cancelled" = "failed"): Promise<void> {
    const request = item.descriptor as StageRequest;
    const result: StageResult = { status, text: "", exitCode: null, outputPath: join(request.artifactDir, STDOUT_LOG), error };
    const fence = { id: item.id, workerId, generation: item.generation, epoch: item.epoch };
    try {
      await this.core.journal.work.complete(fence, { state: "failed", result }, { id: `${error.code}:${item.id}`, digest: error.code });
    } catch (err) {
      this.core.log(`could not settle work ${item.id} (${error.code}): ${ensureError(err).message}`);
      return; // its lease runs out and the item is given out again
    }
    this.core.root.done(item.id, result);
  }
}

/** The result a settled item stands for: what its worker committed, or the failure it was given up with. */
export function resultOf(item: WorkItem): StageResult {
  const who = { ...(item.workerId ? { workerId: item.workerId } : {}), generation: item.generation };
  if (item.result) return { ...(item.result as StageResult), ...who };
  const request = item.descriptor as StageRequest;
  return {
    status: "failed",
    text: "",
    exitCode: null,
    outputPath: join(request.artifactDir, STDOUT_LOG),
    ...who,
    error: { code: item.error?.code ?? "worker_lost", message: item.error?.message ?? `work ${item.id} ended without a result` },
  };
}
