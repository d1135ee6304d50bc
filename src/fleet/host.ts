/**
 * A worker host (`atomic worker`): a host coordinator in this process plus
 * `slots` worker processes, running stages of any run from the shared
 * journal's queue (the contract: ../journal/fleet.ts). The pool's parts are
 * the run pool's (supervisor.ts, dispatcher.ts, worker.ts): only whose items
 * are claimed (HostClaimScope), the way to the roots (host-link.ts) and
 * where a stage's files and cwd are (localize) differ. A stage gets the
 * environment its run recorded when it started, over this host's own
 * (prepare, localize; runners/stage-env.ts), as the run's own workers do.
 *
 * Lifecycle:
 *   running ──SIGTERM──▶ draining ──(idle, or grace over)──▶ stopped
 *      └──────SIGINT, or a second SIGTERM──────────────────────▲
 * - running: claims whenever a worker is idle and a wake-up (NOTIFY) or the
 *   poll (every POLL_MS) says there may be work; heartbeats its row every
 *   HEARTBEAT_MS; reaps expired leases of every host every REAP_MS (a
 *   crashed host's items go to the next generation within a second of
 *   their expiry); reads messages down for the items it runs; relays the
 *   live events of runs a watcher elsewhere asks for (live-relay.ts).
 * - draining: no new claim; running stages get `graceMs` to finish; the
 *   ones still running then are cancelled and their items released (the
 *   next generation, on another host); then stopped.
 * - stopped: workers and stage process groups killed, the row marked
 *   stopped, the journal closed, exit 0. Once the grace is over (or at
 *   once) an unreachable journal is not waited for (Journal.stopWaiting):
 *   releases and the last heartbeat fail at once, their leases run out. Stopping at once (SIGINT, a second
 *   SIGTERM) leaves the items leased: their leases run out and another host
 *   reclaims them.
 * - Losing the database: stages go on; heartbeats, renewals and commits
 *   fail and are retried; a worker whose lease deadline passes stops its
 *   stage itself (work-lease-deadline.ts); results wait in the outbox.
 * Version skew: the journal refuses a schema newer than this binary knows
 * (at open: one sentence, exit 2), and a host that sees the schema migrated
 * past what it knows while it runs (every SKEW_CHECK_MS) claims nothing more;
 * ready items of another pool protocol are never claimed. Either way the
 * host says so in its log and its row (`refused`).
 */

import { CONFIG_DEFAULTS } from "../shared/config/schema.ts";
import { existsSync, mkdirSync, statSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { intercomPaths } from "../intercom/paths.ts";
import type { FleetStore, HostState } from "../journal/fleet.ts";
import type { HostClaimScope } from "../journal/work-queue.ts";
import { LATEST_SCHEMA_VERSION } from "../journal/postgres/migrations.ts";
import type { Journal } from "../journal/journal.ts";
import type { WorkFence, WorkItem } from "../journal/work-queue.ts";
import type { RunId } from "../shared/ids.ts";
import { ensureError } from "../shared/errors.ts";
import { writeStderr } from "../shared/raw-stderr.ts";
import { VERSION } from "../shared/version.ts";
import type { StageRequest } from "../runners/types.ts";
import type { CoordinatorCore, PoolSettings } from "../pool/coordinator-core.ts";
import { Dispatcher } from "../pool/dispatcher.ts";
import { DEFAULT_WORK_LEASE_MS, HEARTBEAT_MS, MAX_GENERATIONS } from "../pool/pool-executor.ts";
import { POOL_PROTOCOL_VERSION, parseMessage } from "../pool/protocol/common.ts";
import { ToCoordinatorSchema } from "../pool/protocol/root-coordinator.ts";
import { StallMonitor } from "../pool/stall-monitor.ts";
import { SWEEP_MS, Supervisor } from "../pool/supervisor.ts";
import { HostLink } from "./host-link.ts";
import { LiveRelay } from "./live-relay.ts";
import { ToolsRelay } from "./tools-relay.ts";
import { Outbox, type Outcome } from "./outbox.ts";
import { artifactStoreFor } from "../artifacts/select.ts";
import { artifactKeyOf, type ArtifactKey, type ArtifactStore } from "../artifacts/store.ts";
import { shipStageFiles, type StageShipper } from "../artifacts/shipper.ts";
import { TRANSCRIPT } from "../artifacts/stage-logs.ts";
import { sessionHere, shipSessionFiles } from "../artifacts/session-files.ts";
import { loadConfig } from "../shared/config/load.ts";
import { recordedEnvironment, type RecordedEnvironment } from "../engine/run-environment.ts";
import type { StageResult } from "../sdk/types.ts";
import { type HostWorkspace, openHostWorkspace, pushHostWorkspace } from "./host-workspace.ts";
import { markWorktree, sweepHostWorktrees, type RunState } from "./host-worktree-sweep.ts";

const POLL_MS = 1_000;
/** How many runs' recorded environments a host keeps (the oldest read goes first). */
const RUN_ENVS_KEPT = 256;
/** Worktree stages remembered (their worktree in this host's checkout, by work id), the oldest forgotten first. */
const WORKSPACES_KEPT = 1024;
const REAP_MS = 500;
/** How often an idle host with a checkout looks for ended runs' worktrees to remove (also at start and after each stage). */
const WORKTREE_SWEEP_MS = 10 * 60_000;
/** The run statuses whose worktrees a host removes (a failed run resumed later gets its branch back from the remote). */
const ENDED_STATUSES: readonly string[] = ["completed", "failed", "cancelled", "skipped"];
const SKEW_CHECK_MS = 5_000;
/** The most a stopping host waits for each of its last writes. */
const STOP_WRITE_MS = 2_000;
/** How often a running stage's new bytes go to the artifact store. */
const SHIP_INTERVAL_MS = 500;
/** The most a stage's result waits for its last bytes to be shipped. */
const SHIP_STOP_MS = 5_000;

export interface HostOptions {
  journal: Journal & { fleet: FleetStore };
  home: string;
  hostId: string;
  slots: number;
  queues: string[];
  workdir: string;
  /** This host's checkout of the runs' repository (`--repo`): worktree stages get their worktree there (host-workspace.ts). */
  repo?: string;
  leaseMs?: number;
  /** How long a spawned worker gets to say it is ready (config timeouts.workerStartMs; its default otherwise). */
  startupTimeoutMs?: number;
  /** How long running stages get to finish after SIGTERM (ms). */
  graceMs: number;
  log?: (line: string) => void;
}

export class WorkerHost implements CoordinatorCore {
  readonly config: PoolSettings;
  readonly stall = new StallMonitor(SWEEP_MS);
  readonly claimScope: HostClaimScope;
  readonly root: HostLink;
  readonly workers: Supervisor;
  /** Worktree stages' worktrees in this host's checkout (or why not), by work id: opened in prepare, pushed in finish. */
  private readonly workspaces = new Map<string, HostWorkspace | string>();
  /** A sweep of ended runs' worktrees under way (host-worktree-sweep.ts): one at a time. */
  private sweeping: Promise<void> | undefined;
  /** The journal's identity (FleetStore.journalId), read once when first needed: the mark of this host's worktrees. */
  private journalId: Promise<string> | undefined;
  readonly dispatcher: Dispatcher;
  readonly journal: Journal & { fleet: FleetStore };
  readonly hostId: string;
  readonly attached = true;
  /** Draining: no new claims. */
  private draining = false;
  /** The journal's schema is newer than this binary knows: no new claims until it is upgraded. */
  private schemaRefused = false;
  shuttingDown = false;
  private state: HostState = "running";
  private refused: string | null = null;
  private readonly timers: ReturnType<typeof setInterval>[] = [];
  /** The heartbeat in flight (heartbeat()). */
  private beating: Promise<void> | undefined;
  private listener: { close(): Promise<void> } | undefined;
  /** Messages down already applied (by seq). */
  private readonly applied = new Set<number>();
  private readonly fleet: FleetStore;
  private readonly outbox: Outbox;
  /** Where stage files go for every machine to read (none: they stay in this host's home). */
  private readonly store: ArtifactStore | undefined;
  /** The environment each run recorded when it started (null: none recorded), by root run id: read once per run. */
  private readonly runEnvs = new Map<RunId, RecordedEnvironment | null>();
  /** The config's secret-named variables: a stage keeps this host's values of them, as of every secret. */
  private readonly secretVariables: readonly string[];
  /** The stages whose files are being shipped, by work id: the shipper, and the attempt's directory here and its key (its session files go at the end). */
  private readonly shippers = new Map<string, { files: StageShipper; dir: string; key: ArtifactKey; stage: { runId: string; stageKey: string; attempt: number } }>();
  /** Continued stages: where this host reads the earlier attempt's session (or why it cannot), by work id; found in prepare (session-files.ts). */
  private readonly sessions = new Map<string, string | { refused: string }>();
  /** Its stages' run tool calls, carried to their roots (tools-relay.ts). */
  private readonly relay: ToolsRelay;
  /** Live events of the runs a watcher elsewhere asks for (live-relay.ts). */
  private readonly liveRelay: LiveRelay;
  private stopped!: () => void;
  readonly done = new Promise<void>((r) => (this.stopped = r));

  constructor(private readonly opts: HostOptions) {
    this.journal = opts.journal;
    this.fleet = opts.journal.fleet;
    this.hostId = opts.hostId;
    const logDir = join(opts.home, "worker-logs");
    mkdirSync(logDir, { recursive: true, mode: 0o700 });
    this.config = {
      workers: opts.slots,
      leaseMs: opts.leaseMs ?? DEFAULT_WORK_LEASE_MS,
      heartbeatMs: HEARTBEAT_MS,
      retireGraceMs: 10_000,
      maxGenerations: MAX_GENERATIONS,
      startupTimeoutMs: opts.startupTimeoutMs ?? CONFIG_DEFAULTS.timeouts.workerStartMs,
      logDir,
      home: opts.home,
    };
    this.claimScope = { queues: opts.queues, protocol: POOL_PROTOCOL_VERSION };
    this.relay = new ToolsRelay(opts.home, this.fleet, (line) => this.log(line));
    this.liveRelay = new LiveRelay(opts.home, this.fleet.liveChannel, (line) => this.log(line), (runId, stage, attempt) => this.shipNow(runId, stage, attempt));
    this.root = new HostLink(this.fleet, (line) => this.log(line), (workId) => this.relay.ended(workId));
    this.workers = new Supervisor(this);
    this.dispatcher = new Dispatcher(this);
    this.outbox = new Outbox(opts.home, opts.journal.work, this.fleet, (line) => this.log(line));
    const { config } = loadConfig({ home: opts.home });
    this.store = artifactStoreFor(opts.journal, config);
    this.secretVariables = config.secretVariables ?? [];
  }

  /**
   * The environment the item's run recorded when it started, read once per run (its first event): its stages
   * get it over this host's own (runners/stage-env.ts), as the run's own workers do and a resume does. Not
   * readable now (the database away): the stage runs with this host's environment, and the next item tries again.
   */
  prepare(item: WorkItem): Promise<void> | undefined {
    const request = item.descriptor as StageRequest;
    const repo = this.opts.repo;
    // A worktree stage, and this host has a checkout: its worktree is opened there first (host-workspace.ts).
    const opening = request.workspace && repo ? openHostWorkspace(repo, this.hostId, { ...request, workspace: request.workspace }).then(async (hw) => {
          // This journal's, with the remote its branch goes to: the sweep of another journal's host leaves it alone.
          if (typeof hw !== "string") {
            // Dead locks removed (or held by a live git): in this host's log now, on the stage's result at its end.
            for (const warning of hw.warnings) this.log(warning);
            await this.markWorktree(hw);
          }
          if (this.workspaces.size >= WORKSPACES_KEPT) this.workspaces.delete(this.workspaces.keys().next().value!);
          this.workspaces.set(item.id, hw);
        })
      : undefined;
    const reading = this.readEnvironment(item);
    const session = this.findSession(item);
    return opening || reading || session ? Promise.all([opening, reading, session]).then(() => {}) : undefined;
  }

  /**
   * A stage continuing an earlier attempt (`continueFrom`) that ran on another machine: its session files, fetched
   * from the artifact store into this host's artifacts directory (artifacts/session-files.ts). A store that fails
   * refuses the stage with that sentence rather than let it start a new session.
   */
  private findSession(item: WorkItem): Promise<void> | undefined {
    const earlier = (item.descriptor as StageRequest).continueFrom;
    if (!earlier) return undefined;
    return sessionHere(earlier.artifactDir, item.rootId, this.store, join(this.opts.home, "artifacts")).then(
      (dir) => {
        if (this.sessions.size >= WORKSPACES_KEPT) this.sessions.delete(this.sessions.keys().next().value!);
        this.sessions.set(item.id, dir);
      },
      (err: unknown) => {
        const name = (item.descriptor as StageRequest).stageName;
        const where = this.store?.location ?? "the artifact store";
        this.sessions.set(item.id, {
          refused: `stage "${name}": the session it continues ran on another machine, and host ${this.hostId} could not fetch it from ${where}: ${ensureError(err).message} (run it again once the store answers, or on the host that ran the earlier stage)`,
        });
      },
    );
  }

  /** The journal's identity, asked again after a failure (the database away). */
  private ownJournal(): Promise<string> {
    this.journalId ??= this.fleet.journalId().catch((err: unknown) => {
      this.journalId = undefined;
      throw err;
    });
    return this.journalId;
  }

  /** Marks a worktree opened here as this journal's (host-worktree-sweep.ts); unmarked, it is swept only while the journal has its run. */
  private async markWorktree(hw: HostWorkspace): Promise<void> {
    try {
      await markWorktree(hw.ws.path, { journal: await this.ownJournal(), remote: hw.remote });
    } catch (err) {
      this.log(`the worktree ${hw.ws.path} was not marked as this journal's: ${ensureError(err).message}`);
    }
  }

  private readEnvironment(item: WorkItem): Promise<void> | undefined {
    if (this.runEnvs.has(item.rootId)) return undefined;
    return this.journal.readEvents(item.rootId, 0, 1).then(
      ([first]) => {
        if (this.runEnvs.size >= RUN_ENVS_KEPT) this.runEnvs.delete(this.runEnvs.keys().next().value!);
        this.runEnvs.set(item.rootId, recordedEnvironment(first?.payload) ?? null);
      },
      (err: unknown) => this.log(`run ${item.rootId}'s environment not read (its stage runs with this host's): ${ensureError(err).message}`),
    );
  }

  /**
   * A stage run in this host's own worktree: what it left is committed and its branch pushed to the shared
   * remote before its result is committed (the result names the pushed head; a refused push fails the stage).
   */
  async finish(workId: string, result: StageResult): Promise<StageResult> {
    // Kept (not deleted): a result sent again finishes the same (nothing more to commit, the push already done).
    const own = this.workspaces.get(workId);
    if (!own || typeof own === "string") return result;
    // Earlier runs that ended meanwhile: their worktrees go now that this stage is done with the checkout.
    queueMicrotask(() => this.sweepWorktrees());
    const cancelled = result.status === "cancelled";
    if (own.warnings.length > 0) result = { ...result, warnings: [...(result.warnings ?? []), ...own.warnings] };
    try {
      // Cancelled too: what it did is kept on the remote (the root takes it into its worktree), not lost with the worktree.
      return { ...result, pushed: await pushHostWorkspace(own, cancelled) };
    } catch (err) {
      const message = `its branch ${own.ws.branch} could not be pushed from host ${this.hostId} to ${own.url}: ${ensureError(err).message}`;
      if (cancelled) {
        this.log(`stage ${own.stage} was cancelled and ${message}; its work stays in ${own.ws.path}`);
        return result;
      }
      return { ...result, status: "failed", error: { code: "workspace_failed", message } };
    }
  }

  /** A watcher's mark passed through the live relay (live-relay.ts): the attempt's transcript goes to the store now. */
  private shipNow(runId: string, stageKey: string, attempt: number): void {
    for (const s of this.shippers.values()) {
      if (s.stage.runId === runId && s.stage.stageKey === stageKey && s.stage.attempt === attempt) void s.files.flush([TRANSCRIPT]).catch(() => {}); // the next pass tries again
    }
  }

  /** The stage's last live events reach its root, and its last bytes the store, before its result is committed. */
  async beforeCommit(workId: string): Promise<void> {
    const shipper = this.shippers.get(workId);
    this.shippers.delete(workId);
    // The session files (a later stage may continue this one on another machine) go whole, once the stage wrote its last.
    const shipped = shipper ? shipper.files.stop({ timeoutMs: SHIP_STOP_MS }).then(() => shipSessionFiles(shipper.dir, this.store!, shipper.key, { timeoutMs: SHIP_STOP_MS })) : undefined;
    await Promise.all([this.root.flush(workId), shipped?.catch((err: unknown) => this.log(`files of work ${workId} not all shipped: ${ensureError(err).message}`))]);
  }

  keepUncommitted(item: { id: string; rootId: RunId }, fence: WorkFence, outcome: Outcome, op: { id: string; digest: string }): boolean {
    return this.outbox.keep(item.rootId, fence, outcome, op);
  }

  async start(): Promise<void> {
    await this.heartbeat();
    this.outbox.start();
    this.workers.start();
    this.timers.push(setInterval(() => void this.heartbeat(false, true), HEARTBEAT_MS));
    this.timers.push(setInterval(() => void this.reap(), REAP_MS));
    this.timers.push(setInterval(() => this.poll(), POLL_MS));
    this.timers.push(setInterval(() => void this.checkSkew(), SKEW_CHECK_MS));
    if (this.opts.repo) {
      this.timers.push(setInterval(() => this.sweepWorktrees(), WORKTREE_SWEEP_MS));
      this.sweepWorktrees();
    }
    void this.listen();
    void this.checkSkew();
    this.liveRelay.start();
    this.log(`ready: host ${this.hostId}, ${this.opts.slots} slot(s), queues ${this.opts.queues.join(",")}, lease ${this.config.leaseMs} ms`);
  }

  /** No new claims while draining or while the journal's schema is newer than this host knows. */
  get paused(): boolean {
    return this.draining || this.schemaRefused;
  }

  /** A stage's request as it runs here: its files under this host's home, its cwd on this host. */
  localize(item: WorkItem): StageRequest | { refused: string; code?: string } {
    this.root.track(item.id, item.rootId);
    const request = item.descriptor as StageRequest;
    const own = this.workspaces.get(item.id);
    if (typeof own === "string") {
      this.workspaces.delete(item.id);
      return { refused: own };
    }
    // A continued stage reads the earlier attempt's session where prepare found it on this machine.
    const session = this.sessions.get(item.id);
    this.sessions.delete(item.id);
    if (typeof session === "object") return { ...session, code: "session_unavailable" };
    const cwd = own ? own.ws.cwd : request.cwdOption === undefined ? this.opts.workdir : isAbsolute(request.cwdOption) ? request.cwdOption : resolve(this.opts.workdir, request.cwdOption);
    if (!isDirectory(cwd)) {
      // A stage's worktree is made by the run's root, in the repository of the root's machine (engine/stage-workspace.ts).
      if (request.cwdOption?.includes(`/atomic-worktrees/${request.runId}/`)) {
        return {
          refused: `stage "${request.stageName}": its worktree ${cwd} was made where the run's root runs, and host ${this.hostId} does not have it (${request.workspace ? `start the host with a checkout of ${request.workspace.remote.url}: atomic worker --repo DIR` : "the run's repository has no remote a host could share; run such a stage on the root's own workers, in a queue they serve"}, or on a host that shares the repository at the same path)`,
        };
      }
      return { refused: `stage "${request.stageName}": its cwd ${cwd} does not exist on host ${this.hostId}` };
    }
    // The root's artifact directory is <its home>/artifacts/<run id>/<stage>/<attempt>: the same path under ours.
    const at = request.artifactDir.lastIndexOf(`/${request.runId}/`);
    const artifactDir = at < 0 ? join(this.opts.home, "artifacts", request.runId, request.stageKey) : join(this.opts.home, "artifacts", request.artifactDir.slice(at + 1));
    const moved = JSON.parse(JSON.stringify(request).replaceAll(JSON.stringify(request.artifactDir).slice(1, -1), JSON.stringify(artifactDir).slice(1, -1))) as StageRequest;
    // Its files are shipped under the directory the root recorded (every reader looks it up by that).
    const key = this.store ? artifactKeyOf(item.rootId, request.artifactDir) : undefined;
    if (this.store && key) {
      const stage = { runId: request.runId, stageKey: request.stageKey, attempt: request.attempt };
      this.shippers.set(item.id, { files: shipStageFiles(artifactDir, this.store, key, { intervalMs: SHIP_INTERVAL_MS }), dir: artifactDir, key, stage });
    }
    const continued = session && moved.continueFrom ? { continueFrom: { ...moved.continueFrom, artifactDir: session } } : {};
    // A sandboxed stage must not see this host's home either (the root named only its own).
    const sandbox = moved.sandbox ? { sandbox: { ...moved.sandbox, hidden: [...new Set([...moved.sandbox.hidden, this.opts.home])] } } : {};
    const recorded = this.runEnvs.get(item.rootId);
    const runEnv = recorded ? { runEnv: { env: recorded.env, secrets: [...recorded.secrets, ...this.secretVariables] } } : {};
    // Run tools: through this host's broker, relayed to the root; a sandboxed stage is shown this host's broker socket instead.
    // Its worktree's commits write to the checkout's git directory: writable in a sandbox too.
    if (own && sandbox.sandbox) sandbox.sandbox = { ...sandbox.sandbox, write: [...sandbox.sandbox.write, own.ws.gitDir] };
    const relayed = this.relay.localize(item.id, item.rootId, { ...moved, ...continued, ...sandbox, ...runEnv, cwd, artifactDir });
    const viaHost = relayed.runTools !== undefined && relayed.runTools.home !== moved.runTools?.home;
    if (viaHost && relayed.sandbox?.channels?.length) relayed.sandbox = { ...relayed.sandbox, channels: [this.brokerDir()] };
    return relayed;
  }

  /** This host's broker's socket directory, made now (a sandbox binds it before the broker may have started). */
  private brokerDir(): string {
    const dir = dirname(intercomPaths(this.opts.home).socket);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return dir;
  }

  /** SIGTERM: drain (no new claims; `graceMs` for the running stages); a second one stops at once. */
  drain(): void {
    if (this.state === "draining") return this.stop("a second SIGTERM");
    if (this.shuttingDown) return;
    this.state = "draining";
    this.draining = true;
    this.log(`draining: no new stages; running ones get ${this.opts.graceMs} ms`);
    void this.heartbeat();
    const until = performance.now() + this.opts.graceMs;
    const check = setInterval(() => {
      const busy = this.workers.busy();
      if (busy.length > 0 && performance.now() < until) return;
      clearInterval(check);
      // From here on an unreachable journal is not waited for: the releases below fail at once (their leases run out).
      this.journal.stopWaiting?.();
      void this.releaseBusy().finally(() => this.stop("drained"));
    }, 100);
  }

  /** Stops now: every worker and stage killed; items still leased run out their leases (reclaimed elsewhere). */
  stop(why: string): void {
    if (this.shuttingDown) return;
    this.shuttingDown = true;
    this.state = "stopped";
    this.log(`stopping: ${why}`);
    this.journal.stopWaiting?.();
    for (const t of this.timers) clearInterval(t);
    this.stall.stop();
    this.liveRelay.close();
    const exited = this.workers.killAll();
    void (async () => {
      await exited;
      // What the outbox still holds stays on disk: the next start of this host commits it.
      this.outbox.close();
      this.relay.close();
      // Best effort, briefly: a host stopping because its database is away does not wait for it.
      await within(STOP_WRITE_MS, Promise.all([this.listener?.close().catch(() => {}), this.heartbeat(true).catch(() => {})]));
      await within(STOP_WRITE_MS, this.journal.close().catch(() => {}));
      this.stopped();
    })();
  }

  fatal(code: string, message: string): void {
    // The journal away is no reason to stop: stages go on, claims and renewals are tried again by the polls.
    if (code === "storage_unavailable") return this.log(`the journal is unavailable (${message}); running stages go on`);
    this.log(`fatal (${code}): ${message}`);
    this.stop(message);
  }

  /** The database being away is no reason to stop a host: its stages go on, writes are retried. */
  storageFailed(_err: unknown): boolean {
    return false;
  }

  log(line: string): void {
    (this.opts.log ?? ((l: string) => writeStderr(`${l}\n`)))(`${new Date().toISOString()} worker host ${line}`);
  }

  // ---------------------------------------------------------------- duties

  /**
   * Records this host's row. Beats go one at a time, so the row ends with the last state sent: the "draining" beat
   * of a SIGTERM still in flight when the final "stopped" one went out on another connection could commit after it,
   * leaving a stopped host shown draining with its slots counted (seen under load in test/fleet/hosts.test.ts). A
   * timer's beat (`tick`) while one is in flight is skipped: the next tick says the same.
   */
  private heartbeat(final = false, tick = false): Promise<void> {
    if (tick && this.beating) return this.beating;
    const prior = this.beating;
    const beat = (prior ?? Promise.resolve()).catch(() => {}).then(() => this.beatOnce(final));
    this.beating = beat;
    const done = () => {
      if (this.beating === beat) this.beating = undefined;
    };
    beat.then(done, done);
    return beat;
  }

  private async beatOnce(final: boolean): Promise<void> {
    try {
      await this.fleet.heartbeat({
        hostId: this.hostId,
        version: VERSION,
        protocol: POOL_PROTOCOL_VERSION,
        schemaVersion: LATEST_SCHEMA_VERSION,
        queues: this.opts.queues,
        slots: this.opts.slots,
        busy: final ? 0 : this.workers.busy().length,
        state: final ? "stopped" : this.state,
        workdir: this.opts.workdir,
        pid: process.pid,
        refused: this.refused,
      });
    } catch (err) {
      if (final) throw err;
      this.log(`heartbeat not recorded: ${ensureError(err).message}`);
    }
  }

  /** Removes the worktrees of ended (or deleted) runs from this host's checkout (host-worktree-sweep.ts). */
  private sweepWorktrees(): void {
    const repo = this.opts.repo;
    if (!repo || this.sweeping || this.shuttingDown) return;
    const runState = async (runId: string): Promise<RunState> => {
      try {
        const run = await this.journal.getRun(runId as RunId);
        return run === undefined ? "gone" : ENDED_STATUSES.includes(run.status) ? "ended" : "live";
      } catch {
        return "live"; // the journal away: asked again at the next sweep
      }
    };
    const used = this.workers.busy().flatMap((slot) => {
      const own = this.workspaces.get(slot.item!.id);
      return own && typeof own !== "string" ? [own.ws.path] : [];
    });
    const inUse = (path: string) => used.some((p) => p === path || p.startsWith(`${path}/`));
    this.sweeping = this.ownJournal()
      .then((journal) => sweepHostWorktrees(repo, journal, runState, inUse))
      .then((swept) => {
        for (const kept of swept.kept) this.log(`kept the worktree of an ended run ${kept}`);
        if (swept.worktrees.length === 0) return;
        const branches = swept.branches.length ? ` and ${swept.branches.length} branch(es) the remote has` : "";
        this.log(`removed ${swept.worktrees.length} worktree(s)${branches} of ended runs from ${repo}`);
      })
      .catch((err: unknown) => this.log(`the worktrees of ended runs in ${repo} were not removed: ${ensureError(err).message}`))
      .finally(() => (this.sweeping = undefined));
  }

  private async reap(): Promise<void> {
    if (this.shuttingDown) return;
    try {
      const items = await this.fleet.reapExpired(this.config.maxGenerations, {
        name: "WorkerRetryLimit",
        code: "worker_retry_limit",
        message: `the stage's worker host stopped renewing its lease ${this.config.maxGenerations} times (crashed or cut off)`,
      });
      for (const i of items) this.log(`reclaimed work ${i.id} of run ${i.rootId} from ${i.state === "ready" ? "an expired lease" : "its last generation: failed"}`);
      if (items.some((i) => i.state === "ready")) void this.dispatcher.dispatch();
    } catch {
      // the database is away: the next sweep tries again
    }
  }

  private poll(): void {
    if (this.shuttingDown) return;
    // Stages that ended without a result to commit (their worker lost, the item released): their files go as they are.
    for (const [workId, shipper] of this.shippers) {
      if (this.workers.running(workId)) continue;
      this.shippers.delete(workId);
      void shipper.files.stop({ timeoutMs: SHIP_STOP_MS }).catch(() => {});
    }
    void this.dispatcher.dispatch();
    void this.readDown();
  }

  private async listen(): Promise<void> {
    if (this.shuttingDown) return;
    try {
      this.listener = await this.fleet.listen(
        () => {
          void this.dispatcher.dispatch();
          void this.readDown();
        },
        { onLost: () => setTimeout(() => void this.listen(), POLL_MS).unref() },
      );
    } catch {
      setTimeout(() => void this.listen(), POLL_MS).unref(); // polled meanwhile
    }
  }

  /** Messages down (cancel, deliver, wrap-up) for the items this host runs, each applied once. */
  private async readDown(): Promise<void> {
    const busy = this.workers.busy();
    if (busy.length === 0) return;
    let messages;
    try {
      messages = await this.fleet.downFor(busy.map((s) => s.item!.id));
    } catch {
      return;
    }
    for (const m of messages) {
      if (this.applied.has(m.seq)) continue;
      this.applied.add(m.seq);
      const msg = parseMessage(ToCoordinatorSchema, m.body, `run ${m.rootId}`);
      const slot = this.workers.running(m.workId);
      if (!msg || !slot) continue;
      if (msg.type === "cancel_work") slot.send({ type: "cancel", workId: m.workId, reason: msg.reason });
      else if (msg.type === "deliver" || msg.type === "wrap_up" || msg.type === "hold") slot.send(msg);
      else if (msg.type === "stage_tool_result") this.relay.result(msg.callId, { ok: msg.ok, output: msg.output });
    }
  }

  private async checkSkew(): Promise<void> {
    try {
      const schema = await this.fleet.schemaVersion();
      this.schemaRefused = schema > LATEST_SCHEMA_VERSION;
      const other = this.schemaRefused ? [] : await this.fleet.foreignProtocols(this.opts.queues, POOL_PROTOCOL_VERSION);
      const refused = this.schemaRefused
        ? `refusing all stages: the journal's schema is version ${schema}, newer than version ${LATEST_SCHEMA_VERSION} that this worker (atomic ${VERSION}) knows; upgrade it`
        : other.length === 0
          ? null
          : `refusing stages of pool protocol ${other.join(", ")}: this worker (atomic ${VERSION}) speaks protocol ${POOL_PROTOCOL_VERSION}; run the same atomic version as the roots`;
      if (refused && refused !== this.refused) this.log(refused);
      this.refused = refused;
    } catch {
      // asked again at the next check
    }
  }

  /** Draining is over: the stages still running are stopped and their items go back to the queue. */
  private async releaseBusy(): Promise<void> {
    for (const slot of this.workers.busy()) {
      const item = slot.item!;
      this.log(`interrupting work ${item.id} (run ${item.rootId}): the drain's grace is over`);
      await this.journal.work
        .release({ id: item.id, workerId: slot.id, generation: item.generation, epoch: item.epoch }, this.config.maxGenerations, {
          name: "WorkerLost",
          code: "worker_lost",
          message: `worker host ${this.hostId} stopped (drained) while the stage ran`,
        })
        .catch((err: unknown) => this.log(`could not release work ${item.id}: ${ensureError(err).message}`));
    }
    await this.fleet.wakeHosts().catch(() => {});
  }
}

function within(ms: number, p: Promise<unknown>): Promise<unknown> {
  return Promise.race([p, Bun.sleep(ms)]);
}

function isDirectory(path: string): boolean {
  try {
    return existsSync(path) && statSync(path).isDirectory();
  } catch {
    return false;
  }
}

