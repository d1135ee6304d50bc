/**
 * The pool coordinator (`atomic --internal-pool-coordinator`, its configuration in ATOMIC_POOL_CONFIG):
 * owns the work queue for one root run, spawns and supervises its workers,
 * and recovers work from lost ones. This file is the process entry and
 * wires the parts (coordinator-core.ts lists them):
 *
 * - Start: it spawns its first worker at once (more as the root's
 *   `work_ready` says stages wait: supervisor.ts) and opens the
 *   journal meanwhile (the root starts a pool with its run's first stage,
 *   so the run is recorded by then); dispatch (dispatcher.ts) begins once
 *   the journal is open, whether or not the root's first `work_ready` came
 *   yet: the stage's item is committed with its start record, and a root
 *   busy recording a fan-out's other stages sends it late.
 * - Control: pausing stops new starts (the dispatcher reads `paused`);
 *   each revision is acknowledged to the root once every worker has.
 * - The root is answered exactly once per item with `work_done`
 *   (root-channel.ts).
 * - When the root goes away (IPC disconnect) or says `shutdown`, or the
 *   pool cannot go on (`fatal`), every worker and stage process group is
 *   killed and the coordinator exits.
 * - The root's lease is watched (every ROOT_LEASE_CHECK_MS, once the
 *   journal is open): once it is no longer at the epoch this pool serves, or
 *   has expired, the root has stopped driving (it stops itself before its
 *   lease expires: src/engine/lease-keeper.ts), even if it cannot say so (a
 *   root stopped by SIGSTOP still holds the IPC channel open): the pool goes
 *   down with its stages rather than run beside the drive that took over.
 * - A journal that takes no writes (a full disk, a home gone read-only: a
 *   commit, heartbeat, claim or lease extension met it) fails the pool at
 *   once with storage_unavailable (`storageFailed`); the root then stops
 *   the run resumably. A busy lock is waited out as before.
 */

import { mkdirSync } from "node:fs";
import { openJournal } from "../journal/open.ts";
import type { Journal } from "../journal/journal.ts";
import type { ClaimScope } from "../journal/work-queue.ts";
import type { RunId } from "../shared/ids.ts";
import { StorageError, ensureError } from "../shared/errors.ts";
import { writeStderr } from "../shared/raw-stderr.ts";
import type { CoordinatorCore } from "./coordinator-core.ts";
import { Dispatcher } from "./dispatcher.ts";
import { POOL_PROTOCOL_VERSION, parseMessage } from "./protocol/common.ts";
import { CoordinatorConfigSchema, type CoordinatorConfig } from "./protocol/root-coordinator.ts";
import { RootChannel } from "./root-channel.ts";
import { StallMonitor } from "./stall-monitor.ts";
import { SWEEP_MS, Supervisor } from "./supervisor.ts";
import { takeRoleConfig } from "../shared/self-exec.ts";
import { writeStopped } from "../journal/sqlite/storage-errors.ts";
import { isLocalHolderRunning } from "../shared/process-info.ts";
import { join } from "node:path";
import type { WorkItem } from "../journal/work-queue.ts";
import type { StageRequest } from "../runners/types.ts";
import { artifactStoreFor } from "../artifacts/select.ts";
import { loadConfig } from "../shared/config/load.ts";
import { SharedSessions } from "./shared-sessions.ts";

const ROOT_LEASE_CHECK_MS = 500;

export async function coordinatorMain(): Promise<void> {
  const config = parseMessage(CoordinatorConfigSchema, safeJson(takeRoleConfig()), "its environment");
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

class Coordinator implements CoordinatorCore {
  readonly rootId: RunId;
  readonly stall = new StallMonitor(SWEEP_MS);
  readonly root: RootChannel;
  readonly claimScope: ClaimScope;
  readonly workers: Supervisor;
  readonly dispatcher: Dispatcher;
  paused = false;
  shuttingDown = false;
  attached = false;
  /** Set by attach(), before any item can be claimed (nothing is dispatched until then). */
  journal!: Journal;
  private attaching: Promise<void> | undefined;
  /** The root is stopping (`stop_waiting`): a lost connection to the journal is not waited for. */
  private stopWaiting = false;
  private leaseWatch: ReturnType<typeof setInterval> | undefined;
  /** On a shared journal: sessions to and from the artifact store (shared-sessions.ts). */
  private sessions: SharedSessions | undefined;

  constructor(readonly config: CoordinatorConfig) {
    this.rootId = config.rootId as RunId;
    this.claimScope = { rootId: this.rootId, epoch: config.rootEpoch, ...(config.queues ? { queues: config.queues } : {}) };
    mkdirSync(config.logDir, { recursive: true });
    this.workers = new Supervisor(this);
    this.dispatcher = new Dispatcher(this);
    this.root = new RootChannel(this, {
      attach: () => this.attach(),
      control: (rev, paused) => void this.applyControl(rev, paused),
      shutdown: (why) => this.shutdown(why),
      stopWaiting: () => {
        this.stopWaiting = true;
        if (this.attached) this.journal.stopWaiting?.();
      },
    });
  }

  start(): void {
    this.root.listen();
    process.on("SIGINT", () => {}); // Ctrl-C is the root's to handle
    process.on("SIGTERM", () => this.shutdown("SIGTERM"));
    this.workers.start(1);
    this.attach();
    const { workers, logDir, leaseMs } = this.config;
    this.root.send({ type: "ready", version: POOL_PROTOCOL_VERSION, pid: process.pid, workers, logDir });
    this.log(`ready: up to ${workers} worker(s), started as stages wait, lease ${leaseMs} ms`);
  }

  /**
   * Opens the journal, once (at start; `work_ready` and `cancel_work` ask
   * again, harmlessly). Items can be claimed once it is open. Queue state
   * is coordination, not the record: the root's journal (synchronous=FULL)
   * is the record, so this connection commits with synchronous=NORMAL.
   */
  private attach(): void {
    if (this.attaching) return;
    const c = this.config;
    this.attaching = openJournal({ home: c.home, durability: "normal", ...(c.journalUrl ? { journalUrl: c.journalUrl } : {}) }).then(
      (journal) => {
        this.journal = journal;
        this.sessions = this.sharedSessions(journal);
        if (this.stopWaiting) journal.stopWaiting?.();
        this.attached = true;
        this.leaseWatch = setInterval(() => void this.watchRootLease(), ROOT_LEASE_CHECK_MS);
        void this.dispatcher.dispatch();
        void this.dispatcher.settleCancelledQueued();
      },
      (err: unknown) => this.fatal("worker_lost", `the pool coordinator cannot open the journal: ${ensureError(err).message}`),
    );
  }

  /** A journal other machines share (it offers an artifact store: Postgres): sessions travel through the store. */
  private sharedSessions(journal: Journal): SharedSessions | undefined {
    if (!journal.artifactStore) return undefined;
    const store = artifactStoreFor(journal, loadConfig({ home: this.config.home }).config);
    return store ? new SharedSessions(store, join(this.config.home, "artifacts"), (line) => this.log(line)) : undefined;
  }

  prepare(item: WorkItem): Promise<void> | undefined {
    return this.sessions?.fetch(item);
  }

  localize(item: WorkItem): StageRequest | { refused: string; code?: string } {
    return this.sessions ? this.sessions.localize(item) : (item.descriptor as StageRequest);
  }

  shipSession(item: WorkItem): Promise<void> | undefined {
    return this.sessions?.ship(item);
  }

  private async watchRootLease(): Promise<void> {
    if (this.shuttingDown) return;
    let why: string | undefined;
    try {
      const lease = await this.journal.getLease(this.rootId);
      if (!lease) why = "was released";
      else if (lease.epoch !== this.config.rootEpoch) why = `was taken over (epoch ${lease.epoch}, by ${lease.holderId})`;
      // By the wall clock, unless the root visibly still runs (a stepped clock must not stop a live run's pool;
      // a stopped root is judged by the clock: journal/run-status.ts).
      else if (lease.renewedAt + lease.timeoutMs < Date.now() && !isLocalHolderRunning(lease)) why = "expired";
    } catch {
      return; // the journal is busy or unreachable: asked again at the next tick (the root decides by its own deadline)
    }
    if (why) this.fatal("worker_lost", `the root's lease on run ${this.rootId} (epoch ${this.config.rootEpoch}) ${why}: this pool stops with its stages`);
  }

  private async applyControl(rev: number, paused: boolean): Promise<void> {
    this.paused = paused;
    await this.workers.control(rev, paused);
    this.root.send({ type: "control_ack", rev });
    if (!paused) void this.dispatcher.dispatch();
  }

  fatal(code: string, message: string): void {
    this.log(`fatal: ${message}`);
    this.root.send({ type: "fatal", code, message });
    this.shutdown(message);
  }

  storageFailed(err: unknown): boolean {
    const fault = err instanceof StorageError ? (this.journal.storageFault() ?? writeStopped(err)) : undefined;
    if (fault) this.fatal("storage_unavailable", fault.message);
    return fault !== undefined;
  }

  private shutdown(why: string): void {
    if (this.shuttingDown) return;
    this.shuttingDown = true;
    this.log(`shutting down: ${why}`);
    this.stall.stop();
    clearInterval(this.leaseWatch);
    // Reap the workers (no zombies left to an init that may not), then go.
    const exited = this.workers.killAll();
    void Promise.all([exited, this.attached ? this.journal.close() : undefined]).finally(() => process.exit(0));
    setTimeout(() => process.exit(0), 2_000).unref();
  }

  log(line: string): void {
    writeStderr(`${new Date().toISOString()} coordinator ${line}\n`);
  }
}
