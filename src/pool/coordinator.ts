/**
 * The pool coordinator (`atomic --internal-pool-coordinator <config>`):
 * owns the work queue for one root run, spawns and supervises its workers,
 * and recovers work from lost ones.
 *
 * - Start: it spawns its workers at once and opens the journal at the
 *   root's first `work_ready` (the root may start a pool before its run
 *   is recorded, and refuse the run after all).
 * - Dispatch: while not paused, each idle worker gets the oldest ready item
 *   (a fenced claim in the journal), sent as `start`. On an idle pool the
 *   start goes out as soon as the claim has decided the lease, while the
 *   lease is still being written and committed (dispatch() says why that
 *   is safe); after a worker's commit, its next item's start carries that
 *   commit's receipt, so it waits for the commit.
 * - Heartbeats (from workers, every heartbeatMs) renew leases in the
 *   journal. The sweep (every 500 ms) looks at each busy worker whose lease
 *   is past due, counting the coordinator's own stalls in the worker's
 *   favour: it pings it; a worker that answers keeps the item (lease
 *   extended); one that does not is lost.
 * - A lost worker (exited, or not answering): its stage's process group is
 *   killed, it is retired (SIGTERM, then SIGKILL after a grace period; a
 *   late commit from it is refused as stale), its item goes back to ready
 *   at the next generation — or fails with worker_retry_limit after
 *   maxGenerations — and a fresh worker takes its place.
 * - The root is answered exactly once per item with `work_done`.
 * - When the root goes away (IPC disconnect) or says `shutdown`, every
 *   worker and stage process group is killed and the coordinator exits.
 */

import { STDOUT_LOG } from "../runners/stage-logs.ts";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { openJournal } from "../journal/open.ts";
import type { Journal, WorkItem } from "../journal/types.ts";
import type { RunId } from "../shared/ids.ts";
import { ensureError } from "../shared/errors.ts";
import type { RunnerEvent, StageRequest } from "../runners/types.ts";
import type { StageResult } from "../sdk/types.ts";
import { killGroup } from "../runners/shell/process-groups.ts";
import { EventBatcher } from "./event-batcher.ts";
import { POOL_PROTOCOL_VERSION, assertNever, parseMessage } from "./protocol/common.ts";
import { FromWorkerSchema, type FromWorker, type Receipt } from "./protocol/coordinator-worker.ts";
import {
  CoordinatorConfigSchema,
  ToCoordinatorSchema,
  type CoordinatorConfig,
  type FromCoordinator,
  type ToCoordinator,
} from "./protocol/root-coordinator.ts";
import { ROLE, selfCommand } from "../shared/self-exec.ts";
import { killStagesOfWorker } from "./reap.ts";
import { StallMonitor } from "./stall-monitor.ts";
import { trace, traceNow, tracing } from "./trace.ts";
import { WorkerSlot, logTail } from "./worker-slot.ts";
import { writeStderr } from "../shared/raw-stderr.ts";
import { faultPoint } from "../shared/fault-points.ts";

const SWEEP_MS = 500;
const STARTUP_TIMEOUT_MS = 15_000;
const CONTROL_ACK_TIMEOUT_MS = 5_000;
const MAX_CLAIM_FAILURES = 3;
/** The worker id under which the coordinator itself takes a cancelled item off the queue. */
const SETTLER_ID = "coordinator";

export async function coordinatorMain(argv: string[]): Promise<void> {
  const config = parseMessage(CoordinatorConfigSchema, safeJson(argv[0]), "command line");
  if (!config || config.version !== POOL_PROTOCOL_VERSION) {
    writeStderr("coordinator: bad or incompatible configuration\n");
    process.exit(2);
  }
  new Coordinator(config).start();
  await new Promise(() => {});
}

function safeJson(text: string | undefined): unknown {
  try {
    return JSON.parse(text ?? "");
  } catch {
    return undefined;
  }
}

class Coordinator {
  private readonly slots = new Map<string, WorkerSlot>();
  private readonly stall = new StallMonitor();
  private readonly events = new Map<string, EventBatcher<RunnerEvent>>();
  /** Items the root cancelled that no worker runs: settled as cancelled at once if queued, else when their claim comes back. */
  private readonly cancelled = new Set<string>();
  private readonly controlAcks = new Map<number, Set<string>>();
  private paused = false;
  private dispatching = false;
  private redispatch = false;
  private shuttingDown = false;
  private workerSeq = 0;
  private startupFailures = 0;
  /** Claim transactions failed in a row (dispatch). */
  private claimFailures = 0;
  private readonly rootId: RunId;
  private readonly sweepTimer: ReturnType<typeof setInterval>;
  /** Set by attach(), before any item can be claimed (nothing is dispatched until then). */
  private journal!: Journal;
  private attached = false;
  private attaching: Promise<void> | undefined;

  constructor(private readonly config: CoordinatorConfig) {
    this.rootId = config.rootId as RunId;
    mkdirSync(config.logDir, { recursive: true });
    this.sweepTimer = setInterval(() => void this.sweep(), SWEEP_MS);
  }

  start(): void {
    process.on("message", (raw: unknown) => {
      const msg = parseMessage(ToCoordinatorSchema, raw, "root");
      if (msg) this.onRoot(msg);
    });
    process.on("disconnect", () => this.shutdown("the root process went away"));
    process.on("SIGINT", () => {}); // Ctrl-C is the root's to handle
    process.on("SIGTERM", () => this.shutdown("SIGTERM"));
    for (let i = 0; i < this.config.workers; i++) this.spawnWorker();
    this.toRoot({ type: "ready", version: POOL_PROTOCOL_VERSION, pid: process.pid, workers: this.config.workers, logDir: this.config.logDir });
    this.log(`ready: ${this.config.workers} worker(s), lease ${this.config.leaseMs} ms`);
  }

  /**
   * Opens the journal, once, when the root first has work for this pool
   * (`work_ready`, `cancel_work`): a pool may be started while the root
   * still checks its command line and loads the workflow, and must not
   * write anything (a fresh home's journal) if the run never starts. Items
   * can be claimed once it is open. Queue state is coordination, not the
   * record: the root's journal (synchronous=FULL) is the record, so this
   * connection commits with synchronous=NORMAL.
   */
  private attach(): void {
    if (this.attaching) return;
    const c = this.config;
    this.attaching = openJournal({ home: c.home, durability: "normal", ...(c.journalUrl ? { journalUrl: c.journalUrl } : {}) }).then(
      (journal) => {
        this.journal = journal;
        this.attached = true;
        void this.dispatch();
        void this.settleCancelledQueued();
      },
      (err: unknown) => this.fatal("worker_lost", `the pool coordinator cannot open the journal: ${ensureError(err).message}`),
    );
  }

  // ---------------------------------------------------------------- root channel

  private onRoot(msg: ToCoordinator): void {
    switch (msg.type) {
      case "work_ready":
        this.attach(); // the first time: dispatches once the journal is open
        void this.dispatch();
        break;
      case "cancel_work": {
        this.attach();
        const slot = this.slotRunning(msg.workId);
        if (slot) slot.send({ type: "cancel", workId: msg.workId, reason: msg.reason });
        else {
          this.cancelled.add(msg.workId);
          void this.settleCancelledQueued();
        }
        break;
      }
      case "deliver": {
        const slot = this.slotRunning(msg.workId);
        if (slot) slot.send(msg);
        else this.toRoot({ type: "deliver_result", workId: msg.workId, messageId: msg.message.id, delivered: false });
        break;
      }
      case "wrap_up":
        this.slotRunning(msg.workId)?.send(msg);
        break;
      case "control":
        void this.applyControl(msg.rev, msg.paused);
        break;
      case "shutdown":
        this.shutdown("the run ended");
        break;
      default:
        assertNever(msg);
    }
  }

  private toRoot(msg: FromCoordinator): void {
    if (process.connected) process.send?.(msg);
  }

  // ---------------------------------------------------------------- workers

  private spawnWorker(): WorkerSlot {
    const id = `w${++this.workerSeq}-${process.pid}`;
    const logPath = join(this.config.logDir, `${id}.log`);
    const proc = Bun.spawn(selfCommand(ROLE.worker, id), {
      stdin: "ignore",
      stdout: "ignore",
      stderr: Bun.file(logPath),
      env: { ...process.env, ATOMIC_HEARTBEAT_MS: String(this.config.heartbeatMs) },
      serialization: "json",
      ipc: (raw) => {
        const msg = parseMessage(FromWorkerSchema, raw, `worker ${id}`);
        if (msg) this.onWorker(slot, msg);
      },
      onExit: (_p, code, signal) => this.onWorkerExit(slot, code, signal),
    });
    const slot = new WorkerSlot(id, proc, logPath);
    this.slots.set(id, slot);
    return slot;
  }

  private onWorker(slot: WorkerSlot, msg: FromWorker): void {
    switch (msg.type) {
      case "ready":
        if (slot.state !== "starting") break;
        this.startupFailures = 0;
        slot.setState("idle");
        void this.dispatch();
        break;
      case "started":
        if (!slot.owns(msg.ref)) break;
        slot.pgid = msg.pgid;
        break;
      case "heartbeat":
        void this.heartbeat(slot, msg);
        break;
      case "events":
        if (!slot.owns(msg.ref)) break;
        for (const e of msg.events) this.batcherFor(msg.ref.workId).push(e as RunnerEvent);
        break;
      case "complete":
        void this.complete(slot, msg);
        break;
      case "pong":
        slot.pongAt = Date.now();
        break;
      case "control_ack":
        this.controlAcks.get(msg.rev)?.add(slot.id);
        break;
      case "deliver_result":
        this.toRoot(msg);
        break;
      default:
        assertNever(msg);
    }
  }

  private async heartbeat(slot: WorkerSlot, msg: Extract<FromWorker, { type: "heartbeat" }>): Promise<void> {
    const fences = msg.refs.map((r) => ({ id: r.workId, workerId: slot.id, generation: r.generation, epoch: r.epoch }));
    try {
      const stale = await this.journal.work.renew(fences, this.config.leaseMs);
      slot.send({ type: "receipt", opId: msg.opId, status: stale.length ? "stale" : "committed" });
      if (stale.length === 0 && msg.refs.some((r) => slot.owns(r))) slot.renewed(Date.now(), this.stall.stalledMs);
      for (const f of stale) slot.send({ type: "cancel", workId: f.id, reason: "this worker no longer holds the item" });
    } catch (err) {
      this.log(`heartbeat from ${slot.id} not recorded: ${ensureError(err).message}`);
    }
  }

  private async complete(slot: WorkerSlot, msg: Extract<FromWorker, { type: "complete" }>): Promise<void> {
    trace("complete", msg.ref.workId);
    const fence = { id: msg.ref.workId, workerId: slot.id, generation: msg.ref.generation, epoch: msg.ref.epoch };
    const result = msg.result as StageResult;
    const body = JSON.stringify(result);
    const outcome = { state: result.status === "completed" ? ("completed" as const) : ("failed" as const), result };
    const op = { id: msg.opId, digest: String(Bun.hash(body)) };
    try {
      // The worker is free once this commits: its next item is leased in the same transaction (one per stage, not two).
      const claimAt = tracing ? traceNow() : 0;
      const { receipt, next } =
        slot.owns(msg.ref) && !this.paused
          ? await this.journal.work.completeAndClaim(fence, outcome, op, { leaseMs: this.config.leaseMs, rootId: this.rootId })
          : { receipt: await this.journal.work.complete(fence, outcome, op), next: undefined };
      trace("committed", fence.id);
      if (next) trace("claim", next.id, claimAt);
      const owned = receipt.status === "committed" && slot.owns(msg.ref);
      const answer = { opId: msg.opId, status: receipt.status };
      if (owned) slot.finish();
      // The next stage first, with the receipt riding on it: it is what keeps the worker busy. Not
      // ours to run after all (the slot moved on meanwhile): settled or handed back by give().
      const carried = next ? await this.give(slot, next, answer) : false;
      if (!carried) slot.send({ type: "receipt", ...answer });
      if (receipt.status !== "committed") {
        this.log(
          `refused ${receipt.status === "stale" ? "a stale" : "a conflicting"} commit from worker ${slot.id} for work ${fence.id} ` +
            `(generation ${fence.generation}, epoch ${fence.epoch}${receipt.status === "stale" && receipt.item ? `; the item is at generation ${receipt.item.generation}, epoch ${receipt.item.epoch}, ${receipt.item.state}` : ""})`,
        );
        return;
      }
      if (!owned) return; // a retry of a commit already answered
      this.events.get(fence.id)?.flush();
      this.events.delete(fence.id);
      this.toRoot({ type: "work_done", workId: fence.id, result: { ...result, workerId: slot.id, generation: fence.generation } });
      if (slot.state === "idle") void this.dispatch();
    } catch (err) {
      this.log(`commit from ${slot.id} for work ${fence.id} not recorded: ${ensureError(err).message}`);
    }
  }

  private onWorkerExit(slot: WorkerSlot, code: number | null, signal: number | null | string): void {
    const how = signal ? `was killed by signal ${signal}` : `exited with code ${code}`;
    const wasStarting = slot.state === "starting";
    const item = slot.state === "busy" ? slot.item : undefined;
    if (slot.pgid) killGroup(slot.pgid, "SIGKILL");
    if (item) killStagesOfWorker(slot.id);
    slot.setState("gone");
    this.slots.delete(slot.id);
    if (this.shuttingDown) return;
    this.log(`worker ${slot.id} ${how}${item ? ` while running work ${item.id}` : ""}`);
    if (item) void this.lose(slot, item, `its worker ${how}`);
    if (wasStarting && ++this.startupFailures >= 3) {
      this.fatal("worker_startup_failed", `workers fail to start; see ${slot.logPath}:\n${logTail(slot.logPath)}`);
      return;
    }
    this.spawnWorker();
  }

  /** A worker lost its item: kill what it ran, retire it, give the item back (or fail it). */
  private async lose(slot: WorkerSlot, item: WorkItem, why: string): Promise<void> {
    const fence = { id: item.id, workerId: slot.id, generation: item.generation, epoch: item.epoch };
    if (slot.pgid) killGroup(slot.pgid, "SIGKILL");
    killStagesOfWorker(slot.id);
    if (slot.alive && slot.state !== "retired") this.retire(slot);
    const request = item.descriptor as StageRequest;
    const message =
      `stage "${request.stageName}" lost its worker ${slot.id} (${why}) at generation ${item.generation}; ` +
      `worker log: ${slot.logPath}`;
    try {
      const receipt = await this.journal.work.release(fence, this.config.maxGenerations, {
        name: "WorkerRetryLimit",
        code: "worker_retry_limit",
        message,
      });
      if (receipt.status !== "committed") return;
      if (receipt.item.state === "failed") {
        const tail = logTail(slot.logPath);
        this.toRoot({
          type: "work_done",
          workId: item.id,
          result: {
            status: "failed",
            text: "",
            exitCode: null,
            outputPath: join(request.artifactDir, STDOUT_LOG),
            workerId: slot.id,
            generation: item.generation,
            error: {
              code: "worker_retry_limit",
              message: `${message}; gave up after ${this.config.maxGenerations} generations${tail ? `\n--- last ${Math.min(8, Math.ceil(tail.length / 1024))} KiB of ${slot.logPath} ---\n${tail}` : ""}`,
            },
          },
        });
      } else {
        this.log(`work ${item.id} released at generation ${receipt.item.generation}`);
        void this.dispatch();
      }
    } catch (err) {
      this.log(`could not release work ${item.id}: ${ensureError(err).message}`);
    }
  }

  /** Take a worker out of service: it may still talk (and be refused); it is killed after the grace period. */
  private retire(slot: WorkerSlot): void {
    slot.setState("retired");
    slot.proc.kill("SIGTERM");
    setTimeout(() => {
      if (slot.alive) slot.proc.kill("SIGKILL");
    }, this.config.retireGraceMs).unref();
    if (!this.shuttingDown) this.spawnWorker();
  }

  // ---------------------------------------------------------------- dispatch and sweep

  private async dispatch(): Promise<void> {
    if (!this.attached) return; // attach() dispatches
    if (this.dispatching) {
      this.redispatch = true;
      return;
    }
    this.dispatching = true;
    try {
      do {
        this.redispatch = false;
        for (;;) {
          if (this.paused) break;
          const idle = [...this.slots.values()].filter((s) => s.state === "idle");
          if (idle.length === 0) break;
          // Every idle worker gets an item from one transaction, and its start as soon as the claim has
          // decided the lease: the worker wakes while the lease is written and committed (an idle pool's
          // claim-to-start, bench/pool.ts: 15-20 us less). Safe: the transaction is synchronous, so nothing
          // a worker sends is read before it ends, and if it fails the workers started in it are retired
          // before anything else runs here (their late commits name a lease that never existed: refused).
          const claimAt = tracing ? traceNow() : 0;
          const started = new Set<WorkerSlot>();
          let items: WorkItem[];
          try {
            items = await this.journal.work.claimMany(
              idle.map((s) => s.id),
              this.config.leaseMs,
              this.rootId,
              (item, i) => {
                trace("claim", item.id, claimAt);
                if (!this.startIfFree(idle[i]!, item)) return;
                started.add(idle[i]!);
                faultPoint("coordinator-started-before-commit");
              },
            );
          } catch (err) {
            for (const slot of started) this.revoke(slot);
            throw err;
          }
          this.claimFailures = 0;
          for (let i = 0; i < items.length; i++) {
            if (!started.has(idle[i]!)) await this.give(idle[i]!, items[i]!);
          }
          if (items.length < idle.length) break; // nothing more is ready
        }
      } while (this.redispatch);
    } catch (err) {
      const why = ensureError(err).message;
      this.log(`dispatch failed: ${why}`);
      // Whatever fails three claims in a row (the journal refuses writes) would fail every one after: the
      // run stops resumably rather than wait for ever, or churn through workers revoked by failed claims.
      if (++this.claimFailures >= MAX_CLAIM_FAILURES) this.fatal("storage_unavailable", `the pool cannot claim work: ${why}`);
    } finally {
      this.dispatching = false;
    }
  }

  /**
   * Starts a claimed item on `slot` (the start message carries `receipt`
   * when given); one cancelled meanwhile is settled, and one whose worker
   * went away is handed back. True when the start message was sent.
   */
  private async give(slot: WorkerSlot, item: WorkItem, receipt?: Receipt): Promise<boolean> {
    if (this.startIfFree(slot, item, receipt)) return true;
    if (this.cancelled.delete(item.id)) {
      await this.settleCancelled(slot.id, item);
      return false;
    }
    // The worker went away while the claim was in flight: its item moves on to the next generation.
    await this.journal.work.release(
      { id: item.id, workerId: slot.id, generation: item.generation, epoch: item.epoch },
      this.config.maxGenerations,
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
    slot.assign(item, Date.now(), this.stall.stalledMs);
    const request = item.descriptor as StageRequest;
    slot.send({ type: "start", workId: item.id, generation: item.generation, epoch: item.epoch, request, ...(receipt ? { receipt } : {}) });
    return true;
  }

  /** `slot` was started in a claim transaction that failed: it holds no lease, so it must not go on. */
  private revoke(slot: WorkerSlot): void {
    this.log(`worker ${slot.id} was given work ${slot.item?.id} by a claim that did not commit; retiring it`);
    killStagesOfWorker(slot.id);
    this.retire(slot);
  }

  /**
   * Items the root cancelled that no worker runs: each one still queued is
   * taken off the queue and settled now, paused or not, without a worker.
   * One that is not (a claim holds it) is settled by give() when its claim
   * comes back.
   */
  private async settleCancelledQueued(): Promise<void> {
    if (!this.attached) return; // attach() calls this once the journal is open
    for (const id of this.cancelled) {
      try {
        const item = await this.journal.work.claimItem(id, SETTLER_ID, this.config.leaseMs);
        if (item) {
          this.cancelled.delete(id);
          await this.settleCancelled(SETTLER_ID, item);
        } else if ((await this.journal.work.get(id))?.state !== "leased") {
          this.cancelled.delete(id); // already settled (its result crossed the cancel)
        }
      } catch (err) {
        this.log(`could not settle cancelled work ${id}: ${ensureError(err).message}`);
      }
    }
  }

  private async settleCancelled(workerId: string, item: WorkItem): Promise<void> {
    const request = item.descriptor as StageRequest;
    const result: StageResult = {
      status: "cancelled",
      text: "",
      exitCode: null,
      outputPath: join(request.artifactDir, STDOUT_LOG),
      error: { code: "cancelled", message: "cancelled before it started" },
    };
    const fence = { id: item.id, workerId, generation: item.generation, epoch: item.epoch };
    await this.journal.work.complete(fence, { state: "failed", result }, { id: `cancel:${item.id}`, digest: "cancel" });
    this.toRoot({ type: "work_done", workId: item.id, result });
  }

  private async sweep(): Promise<void> {
    if (this.shuttingDown) return;
    // The journal deleted or replaced under the run: claims and commits would go to a file nobody reads.
    const lost = this.attached ? this.journal.storageFault() : undefined;
    if (lost) return this.fatal("storage_unavailable", lost.message);
    const now = Date.now();
    const stalled = this.stall.stalledMs;
    const pingTimeout = Math.max(500, Math.min(2_000, this.config.leaseMs / 2));
    for (const slot of this.slots.values()) {
      if (slot.state === "starting" && now - slot.spawnedAt > STARTUP_TIMEOUT_MS) {
        this.log(`worker ${slot.id} did not start within ${STARTUP_TIMEOUT_MS} ms`);
        slot.proc.kill("SIGKILL");
        continue;
      }
      if (slot.state !== "busy" || !slot.item) continue;
      // The coordinator's own stalls since the last heartbeat are not the worker's fault.
      const deadline = slot.renewedAt + this.config.leaseMs + (stalled - slot.stallAtRenew);
      if (now <= deadline) continue;
      if (slot.pingSentAt === undefined) {
        this.log(`worker ${slot.id} is past its lease on work ${slot.item.id} (last renewed ${now - slot.renewedAt} ms ago); pinging it`);
        slot.pingSentAt = now;
        slot.send({ type: "ping", nonce: now });
      } else if (slot.pongAt >= slot.pingSentAt) {
        const fence = slot.fence()!;
        const stale = await this.journal.work.renew([fence], this.config.leaseMs).catch(() => [fence]);
        if (stale.length === 0) slot.renewed(Date.now(), this.stall.stalledMs);
      } else if (now - slot.pingSentAt > pingTimeout + (stalled - slot.stallAtRenew)) {
        this.log(`worker ${slot.id} stopped answering (lease expired, no answer to a ping in ${pingTimeout} ms)`);
        const item = slot.item;
        void this.lose(slot, item, "it stopped answering past its lease");
      }
    }
  }

  private async applyControl(rev: number, paused: boolean): Promise<void> {
    this.paused = paused;
    const live = [...this.slots.values()].filter((s) => s.state === "idle" || s.state === "busy");
    const acks = new Set<string>();
    this.controlAcks.set(rev, acks);
    for (const slot of live) slot.send({ type: "control", rev, paused });
    const started = Date.now();
    const stallAtStart = this.stall.stalledMs;
    while (live.some((s) => s.alive && s.state !== "retired" && !acks.has(s.id))) {
      const waited = Date.now() - started - (this.stall.stalledMs - stallAtStart);
      if (waited > CONTROL_ACK_TIMEOUT_MS) {
        this.log(`control revision ${rev}: not every worker answered within ${CONTROL_ACK_TIMEOUT_MS} ms`);
        break;
      }
      await Bun.sleep(10);
    }
    this.controlAcks.delete(rev);
    this.toRoot({ type: "control_ack", rev });
    if (!paused) void this.dispatch();
  }

  // ---------------------------------------------------------------- helpers

  private slotRunning(workId: string): WorkerSlot | undefined {
    for (const slot of this.slots.values()) if (slot.state === "busy" && slot.item?.id === workId) return slot;
    return undefined;
  }

  private batcherFor(workId: string): EventBatcher<RunnerEvent> {
    let b = this.events.get(workId);
    if (!b) {
      b = new EventBatcher<RunnerEvent>(250, (events) => this.toRoot({ type: "work_events", batch: [{ workId, events }] }));
      this.events.set(workId, b);
    }
    return b;
  }

  private fatal(code: string, message: string): void {
    this.log(`fatal: ${message}`);
    this.toRoot({ type: "fatal", code, message });
    this.shutdown(message);
  }

  private shutdown(why: string): void {
    if (this.shuttingDown) return;
    this.shuttingDown = true;
    this.log(`shutting down: ${why}`);
    clearInterval(this.sweepTimer);
    this.stall.stop();
    for (const slot of this.slots.values()) {
      if (slot.pgid) killGroup(slot.pgid, "SIGKILL");
      slot.proc.kill("SIGKILL");
      if (slot.state === "busy" || slot.state === "retired") killStagesOfWorker(slot.id);
    }
    // Reap the workers (no zombies left to an init that may not), then go.
    const exited = Promise.all([...this.slots.values()].map((s) => s.proc.exited));
    void Promise.all([exited, this.attached ? this.journal.close() : undefined]).finally(() => process.exit(0));
    setTimeout(() => process.exit(0), 2_000).unref();
  }

  private log(line: string): void {
    writeStderr(`${new Date().toISOString()} coordinator ${line}\n`);
  }
}
