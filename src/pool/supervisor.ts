/**
 * Worker supervision: spawning the pool's workers, reading what they send,
 * and the liveness sweep that finds the ones that stopped working.
 *
 * - A root's pool starts one worker with the coordinator (for the run's
 *   first stage) and more as the root's `work_ready` says stages wait
 *   (`want`), up to its configured number: a worker costs a process start
 *   (about 0.08 CPU-seconds on a 2-core machine) and memory, and most runs
 *   of a few sequential stages never need a second. Workers once started
 *   stay until the pool ends. A worker host starts all of its slots at once
 *   (it serves every root's queue and hears of no single root's stages).
 *
 * - Each worker is a WorkerSlot (worker-slot.ts, the state machine). Its
 *   stderr goes to `<logDir>/<id>.log` (a slash of a host's id read as `_`); its IPC messages are validated
 *   here and routed: `complete` to the dispatcher, live events to the
 *   root channel, heartbeats renew its lease in the journal.
 * - The sweep (every 500 ms, on the stall monitor's timer) looks at each busy worker whose lease is past
 *   due, counting the coordinator's own stalls since the last renewal in
 *   the worker's favour: it pings it. The answer names the work the worker
 *   holds: the same item, generation and epoch keeps it (lease extended);
 *   anything else (nothing, another item: it never got or already gave up
 *   the item) loses the slot, and so does no answer within the ping
 *   timeout, or a journal that says the lease is no longer this worker's.
 *   Extending a lease that fails MAX_RENEW_FAILURES times in a row makes
 *   the pool fail (storage_unavailable) rather than keep a slot busy on a
 *   lease nobody can write. A worker that does not send `ready` within
 *   its startup timeout (config timeouts.workerStartMs) is killed.
 * - A worker that reports it could not send its result (`commit_failed`)
 *   loses its item the same way.
 * - A lost worker (exited, or not answering): its stage's process group
 *   (and every process carrying its worker id, reap.ts) is killed, it is
 *   retired (SIGTERM, then SIGKILL after the grace period; a late commit
 *   from it is refused as stale), its item goes back to ready at the next
 *   generation, or fails with worker_retry_limit after maxGenerations, and
 *   a fresh worker takes its place. Three workers in a row that exit
 *   before `ready` make the pool fail (worker_startup_failed).
 * - Control revisions go to every live worker; the coordinator waits for
 *   their acknowledgements with a stall-aware timeout.
 */

import { join } from "node:path";
import type { WorkItem } from "../journal/work-queue.ts";
import { killGroup } from "../runners/shell/process-groups.ts";
import type { RunnerEvent, StageRequest } from "../runners/types.ts";
import { ensureError } from "../shared/errors.ts";
import { newWorkerId } from "../shared/ids.ts";
import { ROLE, selfCommand } from "../shared/self-exec.ts";
import type { CoordinatorCore, WorkerPool } from "./coordinator-core.ts";
import { resultOf } from "./dispatcher.ts";
import { assertNever, parseMessage } from "./protocol/common.ts";
import { FromWorkerSchema, type FromWorker } from "./protocol/coordinator-worker.ts";
import { killStagesOfWorker } from "./reap.ts";
import { WorkerSlot, logTail } from "./worker-slot.ts";
import { childEnv } from "../shared/config/environment.ts";

/** The sweep's period, and so the coordinator's stall monitor's (stall-monitor.ts). */
export const SWEEP_MS = 500;
const CONTROL_ACK_TIMEOUT_MS = 5_000;
const MAX_STARTUP_FAILURES = 3;
const MAX_RENEW_FAILURES = 3;

/** A control revision waiting for the workers that were live when it was sent. */
interface ControlWait {
  live: WorkerSlot[];
  acks: Set<string>;
  done(): void;
}

export class Supervisor implements WorkerPool {
  private readonly slots = new Map<string, WorkerSlot>();
  /** Control revisions sent to the workers and waiting for their acks (control()). */
  private readonly controlWaits = new Map<number, ControlWait>();
  private workerSeq = 0;
  private startupFailures = 0;
  /** Whether the root was told that a worker is up (`worker_up`, once). */
  private workerUp = false;
  /** Lease extensions after a ping that failed in a row (the journal refused them). */
  private renewFailures = 0;
  private sweeping = false;

  constructor(private readonly core: CoordinatorCore) {}

  /**
   * Starts the sweep and `initial` workers: a root's pool one (its first stage's; more as `want` asks), a worker
   * host all of its configured number (it serves every root's queue).
   */
  start(initial = this.core.config.workers): void {
    this.core.stall.runs(() => void this.sweep(), true);
    for (let i = 0; i < Math.min(initial, this.core.config.workers); i++) this.spawn();
  }

  /** Workers up to `stages` (at most the configured number): a stage queued beside busy workers gets one of its own. */
  want(stages: number): void {
    if (this.core.shuttingDown) return;
    const live = [...this.slots.values()].filter((s) => s.state === "starting" || s.state === "idle" || s.state === "busy").length;
    for (let i = live; i < Math.min(stages, this.core.config.workers); i++) this.spawn();
  }

  idle(): WorkerSlot[] {
    return [...this.slots.values()].filter((s) => s.state === "idle");
  }

  /** The workers running an item now. */
  busy(): WorkerSlot[] {
    return [...this.slots.values()].filter((s) => s.state === "busy" && s.item !== undefined);
  }

  /** The worker running `workId`, if any. */
  running(workId: string): WorkerSlot | undefined {
    for (const slot of this.slots.values()) if (slot.state === "busy" && slot.item?.id === workId) return slot;
    return undefined;
  }

  private spawn(): WorkerSlot {
    const { config } = this.core;
    const id = `${newWorkerId(++this.workerSeq)}${this.core.hostId ? `@${this.core.hostId}` : ""}`;
    // A worker host's default identity has slashes in it (hostname/machine id/boot id/pid namespace: shared/process-info.ts).
    const logPath = join(config.logDir, `${id.replaceAll("/", "_")}.log`);
    const proc = Bun.spawn(selfCommand(ROLE.worker, id), {
      stdin: "ignore",
      stdout: "ignore",
      stderr: Bun.file(logPath),
      env: childEnv({ ATOMIC_HEARTBEAT_MS: String(config.heartbeatMs), ATOMIC_WORK_LEASE_MS: String(config.leaseMs), ATOMIC_LIVE_HOME: config.home }),
      serialization: "json",
      ipc: (raw) => {
        const msg = parseMessage(FromWorkerSchema, raw, `worker ${id}`);
        if (msg) this.onWorker(slot, msg);
      },
      onExit: (_p, code, signal) => this.onExit(slot, code, signal),
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
        if (!this.workerUp) {
          this.workerUp = true;
          this.core.root.send({ type: "worker_up" });
        }
        void this.core.dispatcher.dispatch();
        break;
      case "heartbeat":
        void this.heartbeat(slot, msg);
        break;
      case "events":
        if (!slot.owns(msg.ref)) break;
        if (msg.pgid) slot.pgid = msg.pgid; // the batch of the stage's start
        this.core.root.events(msg.ref.workId, msg.events as RunnerEvent[]);
        break;
      case "complete":
        // Its last live events go on with the item's work_done (root-channel.ts), not in a message of their own.
        if (msg.events && slot.owns(msg.ref)) this.core.root.events(msg.ref.workId, msg.events as RunnerEvent[], { hold: true });
        void this.core.dispatcher.complete(slot, msg);
        break;
      case "pong":
        this.pong(slot, msg);
        break;
      case "commit_failed":
        if (slot.owns(msg.ref)) void this.lose(slot, slot.item!, `it could not send its result: ${msg.message}`);
        break;
      case "control_ack":
        this.controlWaits.get(msg.rev)?.acks.add(slot.id);
        this.settleControl();
        break;
      case "deliver_result":
        this.core.root.send(msg);
        break;
      default:
        assertNever(msg);
    }
  }

  private async heartbeat(slot: WorkerSlot, msg: Extract<FromWorker, { type: "heartbeat" }>): Promise<void> {
    const { journal, config, stall } = this.core;
    const fences = msg.refs.map((r) => ({ id: r.workId, workerId: slot.id, generation: r.generation, epoch: r.epoch }));
    try {
      const stale = await journal.work.renew(fences, config.leaseMs);
      slot.send({ type: "receipt", opId: msg.opId, status: stale.length ? "stale" : "committed" });
      // The slot's own item renewed (a ref of a result still being committed may be stale by now: that is not this item).
      const mine = slot.item;
      if (mine && msg.refs.some((r) => slot.owns(r)) && !stale.some((f) => f.id === mine.id)) slot.renewed(performance.now(), stall.stalledMs);
      for (const f of stale) slot.send({ type: "cancel", workId: f.id, reason: "this worker no longer holds the item" });
    } catch (err) {
      this.core.log(`heartbeat from ${slot.id} not recorded: ${ensureError(err).message}`);
      this.core.storageFailed(err);
    }
  }

  /** An answer to a ping: kept only if it names the item the ping asked about. */
  private pong(slot: WorkerSlot, msg: Extract<FromWorker, { type: "pong" }>): void {
    const asked = slot.pingedFor;
    if (msg.nonce !== slot.pingSentAt || !asked || !slot.owns({ workId: asked.id, ...asked })) return; // not the ping outstanding now
    if (msg.holds && msg.holds.workId === asked.id && msg.holds.generation === asked.generation && msg.holds.epoch === asked.epoch) {
      slot.pongAt = performance.now();
      return;
    }
    const holds = msg.holds ? `work ${msg.holds.workId} (generation ${msg.holds.generation}, epoch ${msg.holds.epoch})` : "no work";
    this.core.log(`worker ${slot.id} answered a ping about work ${asked.id} holding ${holds}`);
    void this.lose(slot, slot.item!, `it holds ${holds} instead`);
  }

  private onExit(slot: WorkerSlot, code: number | null, signal: number | null | string): void {
    const how = signal ? `was killed by signal ${signal}` : `exited with code ${code}`;
    const wasStarting = slot.state === "starting";
    const item = slot.state === "busy" ? slot.item : undefined;
    if (slot.pgid) killGroup(slot.pgid, "SIGKILL");
    if (item) killStagesOfWorker(slot.id);
    slot.setState("gone");
    this.slots.delete(slot.id);
    this.settleControl();
    if (this.core.shuttingDown) return;
    this.core.log(`worker ${slot.id} ${how}${item ? ` while running work ${item.id}` : ""}`);
    if (item) void this.lose(slot, item, `its worker ${how}`);
    if (wasStarting && ++this.startupFailures >= MAX_STARTUP_FAILURES) {
      this.core.fatal("worker_startup_failed", `workers fail to start; see ${slot.logPath}:\n${logTail(slot.logPath)}`);
      return;
    }
    this.spawn();
  }

  /** A worker lost its item: kill what it ran, retire it, give the item back (or fail it). */
  private async lose(slot: WorkerSlot, item: WorkItem, why: string): Promise<void> {
    const { journal, config } = this.core;
    const fence = { id: item.id, workerId: slot.id, generation: item.generation, epoch: item.epoch };
    if (slot.pgid) killGroup(slot.pgid, "SIGKILL");
    killStagesOfWorker(slot.id);
    if (slot.alive && slot.state !== "retired") this.retire(slot);
    const request = item.descriptor as StageRequest;
    // The failure, should this be the last generation, carries the log's tail in the journal itself: the
    // root's work_status can find the item failed before this call's answer comes back, and sends what the
    // journal holds (dispatcher.ts status()); both must say the same.
    const tail = logTail(slot.logPath);
    const message =
      `stage "${request.stageName}" lost its worker ${slot.id} (${why}) at generation ${item.generation}; ` +
      `worker log: ${slot.logPath}; gave up after ${config.maxGenerations} generations` +
      (tail ? `\n--- last ${Math.min(8, Math.ceil(tail.length / 1024))} KiB of ${slot.logPath} ---\n${tail}` : "");
    try {
      const receipt = await journal.work.release(fence, config.maxGenerations, {
        name: "WorkerRetryLimit",
        code: "worker_retry_limit",
        message,
      });
      if (receipt.status !== "committed") return;
      if (receipt.item.state === "failed") {
        this.core.root.done(item.id, { ...resultOf(receipt.item), workerId: slot.id, generation: item.generation });
      } else {
        this.core.log(`work ${item.id} released at generation ${receipt.item.generation}`);
        void this.core.dispatcher.dispatch();
      }
    } catch (err) {
      this.core.log(`could not release work ${item.id}: ${ensureError(err).message}`);
    }
  }

  /** Take a worker out of service: it may still talk (and be refused); it is killed after the grace period. */
  retire(slot: WorkerSlot): void {
    slot.setState("retired");
    this.settleControl();
    slot.proc.kill("SIGTERM");
    setTimeout(() => {
      if (slot.alive) slot.proc.kill("SIGKILL");
    }, this.core.config.retireGraceMs).unref();
    if (!this.core.shuttingDown) this.spawn();
  }

  private async sweep(): Promise<void> {
    // One at a time: a lease extension can wait for the journal (another process's lock) longer than a tick.
    if (this.core.shuttingDown || this.sweeping) return;
    this.sweeping = true;
    try {
      await this.sweepOnce();
    } finally {
      this.sweeping = false;
    }
  }

  private async sweepOnce(): Promise<void> {
    const { config, stall } = this.core;
    // The journal deleted or replaced under the run: claims and commits would go to a file nobody reads.
    const lost = this.core.attached ? this.core.journal.storageFault() : undefined;
    if (lost) return this.core.fatal("storage_unavailable", lost.message);
    const now = performance.now(); // monotonic: a stepped wall clock neither expires nor extends a worker's lease
    const stalled = stall.stalledMs;
    const pingTimeout = Math.max(500, Math.min(2_000, config.leaseMs / 2));
    for (const slot of [...this.slots.values()]) {
      if (slot.state === "starting" && now - slot.spawnedAt > this.core.config.startupTimeoutMs) {
        this.core.log(`worker ${slot.id} did not start within ${this.core.config.startupTimeoutMs} ms`);
        slot.proc.kill("SIGKILL");
        continue;
      }
      if (slot.state !== "busy" || !slot.item) continue;
      // The coordinator's own stalls since the last heartbeat are not the worker's fault.
      const deadline = slot.renewedAt + config.leaseMs + (stalled - slot.stallAtRenew);
      if (now <= deadline) continue;
      if (slot.pingSentAt === undefined) {
        this.core.log(`worker ${slot.id} is past its lease on work ${slot.item.id} (last renewed ${now - slot.renewedAt} ms ago); pinging it`);
        slot.pingSentAt = now;
        slot.pingedFor = slot.fence();
        slot.send({ type: "ping", nonce: now });
      } else if (slot.pongAt >= slot.pingSentAt) {
        await this.extend(slot);
      } else if (now - slot.pingSentAt > pingTimeout + (stalled - slot.stallAtRenew)) {
        this.core.log(`worker ${slot.id} stopped answering (lease expired, no answer to a ping in ${pingTimeout} ms)`);
        const item = slot.item;
        void this.lose(slot, item, "it stopped answering past its lease");
      }
    }
  }

  /** A worker past its lease answered for its item: the lease is extended, unless the journal says it is not the worker's. */
  private async extend(slot: WorkerSlot): Promise<void> {
    const { journal, config, stall } = this.core;
    const fence = slot.fence()!;
    let stale: unknown[];
    try {
      stale = await journal.work.renew([fence], config.leaseMs);
      this.renewFailures = 0;
    } catch (err) {
      const why = ensureError(err).message;
      this.core.log(`could not extend the lease of worker ${slot.id} on work ${fence.id}: ${why}`);
      if (this.core.storageFailed(err)) return;
      if (++this.renewFailures >= MAX_RENEW_FAILURES) this.core.fatal("storage_unavailable", `the pool cannot extend work leases: ${why}`);
      return;
    }
    if (!slot.owns({ workId: fence.id, ...fence })) return; // it committed or was lost meanwhile
    if (stale.length === 0) slot.renewed(performance.now(), stall.stalledMs);
    else void this.lose(slot, slot.item!, "the work queue no longer has the item leased to it");
  }

  /**
   * Sends control revision `rev` to every live worker; resolves once each
   * acknowledged it, left service, or the stall-aware timeout passed. The
   * wait is on the acks and exits themselves (settleControl), never a poll.
   */
  control(rev: number, paused: boolean): Promise<void> {
    const { stall } = this.core;
    const live = [...this.slots.values()].filter((s) => s.state === "idle" || s.state === "busy");
    const started = Date.now();
    const stallAtStart = stall.stalledMs;
    return new Promise<void>((resolve) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const wait: ControlWait = {
        live,
        acks: new Set(),
        done: () => {
          clearTimeout(timer);
          this.controlWaits.delete(rev);
          resolve();
        },
      };
      // The timeout does not count this process's own stalls: when it fires early for that reason, it waits the rest.
      const arm = (ms: number) => {
        timer = setTimeout(() => {
          const waited = Date.now() - started - (stall.stalledMs - stallAtStart);
          if (waited < CONTROL_ACK_TIMEOUT_MS) return arm(CONTROL_ACK_TIMEOUT_MS - waited);
          this.core.log(`control revision ${rev}: not every worker answered within ${CONTROL_ACK_TIMEOUT_MS} ms`);
          wait.done();
        }, ms);
      };
      this.controlWaits.set(rev, wait);
      for (const slot of live) slot.send({ type: "control", rev, paused });
      arm(CONTROL_ACK_TIMEOUT_MS);
      this.settleControl();
    });
  }

  /** Ends every control wait whose workers have all acknowledged or left service. */
  private settleControl(): void {
    for (const wait of [...this.controlWaits.values()]) {
      if (!wait.live.some((s) => s.alive && s.state !== "retired" && !wait.acks.has(s.id))) wait.done();
    }
  }

  /** Shutdown: every worker and stage process killed at once; resolves when the workers are reaped. */
  killAll(): Promise<unknown> {
    this.core.stall.stop();
    for (const slot of this.slots.values()) {
      if (slot.pgid) killGroup(slot.pgid, "SIGKILL");
      slot.proc.kill("SIGKILL");
      if (slot.state === "busy" || slot.state === "retired") killStagesOfWorker(slot.id);
    }
    return Promise.all([...this.slots.values()].map((s) => s.proc.exited));
  }
}
