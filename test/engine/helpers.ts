/**
 * A scoped fixture for in-process engine tests: a real SQLite journal in a
 * temp home (or, with ATOMIC_TEST_JOURNAL=postgres, a schema of the test
 * Postgres cluster standing for it), root runs driven by `RootRun` in this
 * process, and every observer event collected.
 *
 *   await withEngine(async (fx) => {
 *     const first = await fx.start(wf);         // not running yet
 *     fx.onEvent((e) => { if (...) first.stop(); });
 *     const out = await first.run();
 *     const again = await fx.resumeRun(first.runId, otherWf);
 *   });
 *
 * Two ways to end a driver early:
 * - `stop(reason)`: what Ctrl-C (or `atomic cancel`) does; the run records
 *   "interrupted" (or "cancelled") and gives its lease back.
 * - `crash()` / `crashOn(entry => ...)`: every later write of that driver
 *   fails as if its process had died at that instant; the batch that
 *   tripped it is not written, nothing more is recorded, the lease is not
 *   released and the run row stays "running". Each driver has its own
 *   crash switch, so a resume in the same test writes normally.
 *
 * Each start and resume reads its config as a spawned `atomic run` of the
 * tests would: the home's and the project's files, then the tests' own
 * (test/helpers/atomic.ts TEST_CONFIG: stage starts are not paced by the
 * machine's load, which the suite itself raises).
 *
 * `withEngine` stops drivers still running, closes the journal and removes
 * the home; `engineAfterEach` (register it with afterEach) fails a test
 * that left a stage process group alive, and removes temp directories.
 */

import { readdirSync, readFileSync } from "node:fs";
import { RootRun, type DriverOptions } from "../../src/engine/driver.ts";
import { validateInputs } from "../../src/engine/inputs.ts";
import type { EngineEvent } from "../../src/engine/observer.ts";
import type { RunOutcome } from "../../src/engine/step-run.ts";
import type { StopReason } from "../../src/engine/run-tree.ts";
import { InProcessExecutor, type StageExecutor } from "../../src/runners/stage-executor.ts";
import { EVENT } from "../../src/engine/journal-events.ts";
import { openJournal } from "../../src/journal/open.ts";
import { journalUrlForHome } from "../helpers/postgres.ts";
import type { AppendEntry, AppendOutcome } from "../../src/journal/append.ts";
import type { AcquireOptions, Journal, ListRunsFilter } from "../../src/journal/journal.ts";
import type { MessageStore } from "../../src/journal/messages.ts";
import type { HolderInfo, JournalEvent, Lease, RunRecord } from "../../src/journal/runs.ts";
import { killAllGroups, killGroup, liveGroupCount } from "../../src/runners/shell/process-groups.ts";
import type { DeliveryMode, RunnerEvent, StageRequest, WrapUpReason } from "../../src/runners/types.ts";
import { LeaseLostError, StorageError } from "../../src/shared/errors.ts";
import type { RunId } from "../../src/shared/ids.ts";
import type { WorkflowDefinition } from "../../src/sdk/types.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { TEST_CONFIG } from "../helpers/atomic.ts";
import { loadConfig } from "../../src/shared/config/load.ts";

export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Polls `cond` until it is truthy; fails (never hangs) after `timeoutMs`. */
export async function waitUntil<T>(cond: () => T | Promise<T>, what = "condition", timeoutMs = 20_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await cond();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(10);
  }
}

/** Resolves when `signal` aborts (for tool functions that wait to be stopped). */
export function aborted(signal: AbortSignal): Promise<unknown> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(signal.reason);
    else signal.addEventListener("abort", () => resolve(signal.reason), { once: true });
  });
}

/** True when no process with this pid exists any more (a zombie counts as gone). */
export function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return true;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return true;
  }
}

/** Live (non-zombie) processes whose process group is `pgid`. */
export function groupMembers(pgid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(pgrp) === pgid && state !== "Z") out.push(Number(name));
    } catch {
      // the process ended while we looked
    }
  }
  return out;
}

/** Process groups of every stage started by a fixture driver (a stage's pid is its group id). */
const stageGroups = new Set<number>();

/** The in-process executor, noting each stage's process group for the leak check. */
class TrackingExecutor implements StageExecutor {
  readonly queued = false;
  private readonly inner = new InProcessExecutor();
  execute(request: StageRequest, signal: AbortSignal, onEvent: (event: RunnerEvent) => void) {
    return this.inner.execute(request, signal, (event) => {
      if (event.type === "started" && event.pid) stageGroups.add(event.pid);
      onEvent(event);
    });
  }
  deliver(stage: { runId: string; stageKey: string }, message: { id: string; text: string }, mode: DeliveryMode) {
    return this.inner.deliver(stage, message, mode);
  }
  wrapUp(stage: { runId: string; stageKey: string }, text: string, reason: WrapUpReason) {
    return this.inner.wrapUp(stage, text, reason);
  }
  close() {
    return this.inner.close();
  }
}

/** A deterministic pseudo-random generator (mulberry32) for seeded tests. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The real journal, seen through one driver: after `crash()` every write
 * fails with LeaseLostError (so the engine writes nothing more, as if its
 * process were gone) and the lease is left as it was.
 */
class CrashableJournal implements Journal {
  crashed = false;
  /** Renewals fail as if the database could not be reached (not a lost lease). */
  renewalsFail = false;
  trigger: ((entry: AppendEntry) => boolean) | undefined;

  constructor(private readonly inner: Journal) {}

  get location() {
    return this.inner.location;
  }
  get work() {
    return this.inner.work;
  }
  get views() {
    return this.inner.views;
  }
  get retention() {
    return this.inner.retention;
  }
  get schedules() {
    return this.inner.schedules;
  }
  get tags() {
    return this.inner.tags;
  }
  get counters() {
    return this.inner.counters;
  }
  get code() {
    return this.inner.code;
  }
  /** The message store; its lease-holder writes fail after a crash like appends do. */
  get messages(): MessageStore {
    const inner = this.inner.messages;
    const fenced = new Set(["claimForStage", "bindForStage", "settle", "settleAll", "timeOutPrompt"]);
    return new Proxy(inner, {
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver) as unknown;
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          if (fenced.has(String(prop)) && this.crashed) {
            const lease = args[0] as Lease;
            return Promise.reject(new LeaseLostError(lease.rootId, lease.epoch));
          }
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
  }
  storageFault() {
    return this.inner.storageFault();
  }
  acquireLease(rootId: RunId, holder: HolderInfo, opts: AcquireOptions): Promise<Lease> {
    return this.inner.acquireLease(rootId, holder, opts);
  }
  async renewLease(lease: Lease): Promise<Lease> {
    if (this.crashed) throw new LeaseLostError(lease.rootId, lease.epoch);
    if (this.renewalsFail) throw new StorageError("storage_unavailable", "the journal cannot be reached (test)");
    return this.inner.renewLease(lease);
  }
  async releaseLease(lease: Lease): Promise<void> {
    if (!this.crashed) await this.inner.releaseLease(lease);
  }
  getLease(rootId: RunId) {
    return this.inner.getLease(rootId);
  }
  async append(lease: Lease, entries: AppendEntry[]): Promise<AppendOutcome[]> {
    if (!this.crashed && this.trigger && entries.some(this.trigger)) this.crashed = true;
    if (this.crashed) throw new LeaseLostError(lease.rootId, lease.epoch);
    return this.inner.append(lease, entries);
  }
  getRun(id: RunId) {
    return this.inner.getRun(id);
  }
  findRuns(prefix: string, limit: number) {
    return this.inner.findRuns(prefix, limit);
  }
  listRuns(filter?: ListRunsFilter) {
    return this.inner.listRuns(filter);
  }
  countRuns(filter?: ListRunsFilter) {
    return this.inner.countRuns(filter);
  }
  readEvents(runId: RunId, afterSeq?: number, limit?: number) {
    return this.inner.readEvents(runId, afterSeq, limit);
  }
  requestControl(runId: RunId, action: string) {
    return this.inner.requestControl(runId, action);
  }
  async close(): Promise<void> {
    // the fixture owns the real journal
  }
}

export interface DriveOptions {
  leaseTimeoutMs?: number;
  digest?: string;
  executor?: DriverOptions["executor"];
}

/** One driver of one root run (a start or a resume). */
export interface Driven {
  readonly root: RootRun;
  readonly runId: RunId;
  /** Runs the workflow to its end (memoized: call it as often as you like). */
  run(): Promise<RunOutcome>;
  stop(reason?: StopReason): void;
  /** From now on this driver's writes fail as if its process died. */
  crash(): void;
  /** Crash when an append batch holds a matching entry (that batch is not written). */
  crashOn(pred: (entry: AppendEntry) => boolean): void;
  readonly crashed: boolean;
  /** From now on this driver's lease renewals fail with a storage error (a partition from the database). */
  failRenewals(): void;
}

export interface Engine {
  home: string;
  /** The real journal (unaffected by crashes). */
  journal: Journal;
  /** Every observer event of every driver of this test, in order. */
  events: EngineEvent[];
  onEvent(listener: (event: EngineEvent) => void): () => void;
  /** Validates inputs like the CLI does, records the run, and returns its driver (not yet running). */
  start(definition: WorkflowDefinition<any, any>, inputs?: Record<string, unknown>, opts?: DriveOptions): Promise<Driven>;
  /** start + run to the end. */
  run(definition: WorkflowDefinition<any, any>, inputs?: Record<string, unknown>, opts?: DriveOptions): Promise<RunOutcome & { runId: RunId }>;
  /** `record`: the run as the caller read it before the lease, as `atomic resume` does (default: read now). */
  resume(runId: RunId, definition: WorkflowDefinition<any, any>, opts?: DriveOptions, record?: RunRecord): Promise<Driven>;
  resumeRun(runId: RunId, definition: WorkflowDefinition<any, any>, opts?: DriveOptions): Promise<RunOutcome>;
  getRun(runId: RunId): Promise<RunRecord>;
  journalEvents(runId: RunId): Promise<JournalEvent[]>;
  /** The run's checkpoint events, in journal order. */
  checkpoints(runId: RunId): Promise<JournalEvent[]>;
  /** Observer events of one type (and optionally one run). */
  eventsOf<T extends EngineEvent["type"]>(type: T, runId?: string): Extract<EngineEvent, { type: T }>[];
}

const DIGEST = "sha256:test";

export async function withEngine<T>(cb: (fx: Engine) => Promise<T>): Promise<T> {
  const home = makeTempDir("atomic-engine-");
  // ATOMIC_TEST_JOURNAL=postgres: the home's journal is a schema in the test cluster (test/helpers/postgres.ts).
  const journal = await openJournal({ home, durability: "normal", journalUrl: journalUrlForHome(home) });
  const events: EngineEvent[] = [];
  const listeners = new Set<(event: EngineEvent) => void>();
  const drivers: { driven: Driven; running: Promise<RunOutcome> | undefined }[] = [];

  const observer = (event: EngineEvent) => {
    events.push(event);
    for (const l of [...listeners]) l(event);
  };

  const drive = (root: RootRun, crashable: CrashableJournal): Driven => {
    const slot: { driven: Driven; running: Promise<RunOutcome> | undefined } = { driven: undefined as never, running: undefined };
    slot.driven = {
      root,
      runId: root.runId,
      run: () => (slot.running ??= root.run()),
      stop: (reason = "interrupted") => root.stop(reason),
      crash: () => {
        crashable.crashed = true;
      },
      crashOn: (pred) => {
        crashable.trigger = pred;
      },
      failRenewals: () => {
        crashable.renewalsFail = true;
      },
      get crashed() {
        return crashable.crashed;
      },
    };
    drivers.push(slot);
    return slot.driven;
  };

  const driverOptions = (crashable: CrashableJournal, opts: DriveOptions): DriverOptions => ({
    journal: crashable,
    home,
    observer,
    // the config a spawned atomic of the tests reads (test/helpers/atomic.ts): the home's and the project's
    // files, then TEST_CONFIG's (no pacing by load: the suite's own load would pace every start once a second)
    config: loadConfig({ home, env: { ...process.env, ATOMIC_CONFIG: TEST_CONFIG } }).config,
    ...(opts.leaseTimeoutMs !== undefined ? { leaseTimeoutMs: opts.leaseTimeoutMs } : {}),
    executor: opts.executor ?? new TrackingExecutor(),
  });

  const fx: Engine = {
    home,
    journal,
    events,
    onEvent(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async start(definition, inputs = {}, opts = {}) {
      const file = `/virtual/${definition.name}.ts`;
      const valid = validateInputs(definition.inputs ?? {}, inputs, file);
      const crashable = new CrashableJournal(journal);
      const root = await RootRun.start(driverOptions(crashable, opts), {
        definition: definition as WorkflowDefinition,
        workflowPath: file,
        digest: opts.digest ?? DIGEST,
        inputs: valid,
      });
      return drive(root, crashable);
    },
    async run(definition, inputs, opts) {
      const driven = await fx.start(definition, inputs, opts);
      return { ...(await driven.run()), runId: driven.runId };
    },
    async resume(runId, definition, opts = {}, read) {
      const record = read ?? (await fx.getRun(runId));
      const crashable = new CrashableJournal(journal);
      const root = await RootRun.resume(driverOptions(crashable, opts), record, definition as WorkflowDefinition, opts.digest ?? DIGEST);
      return drive(root, crashable);
    },
    async resumeRun(runId, definition, opts) {
      return (await fx.resume(runId, definition, opts)).run();
    },
    async getRun(runId) {
      const run = await journal.getRun(runId);
      if (!run) throw new Error(`run ${runId} is not in the journal`);
      return run;
    },
    journalEvents: (runId) => journal.readEvents(runId),
    async checkpoints(runId) {
      return (await journal.readEvents(runId)).filter((e) => e.type === EVENT.checkpoint);
    },
    eventsOf(type, runId) {
      return events.filter((e) => e.type === type && (runId === undefined || e.runId === runId)) as never;
    },
  };

  try {
    return await cb(fx);
  } finally {
    listeners.clear();
    for (const slot of drivers) {
      if (!slot.running) continue;
      slot.driven.stop("interrupted");
      await slot.running.catch(() => {});
    }
    await journal.close();
  }
}

/**
 * For afterEach: fails the test if a shell stage's process group still has
 * a live process (a background child included) or the runner still tracks
 * one, after killing them so one leak does not poison the next test; then
 * removes every temp directory.
 */
export async function engineAfterEach(): Promise<void> {
  try {
    const leaked = () => [...stageGroups].filter((g) => groupMembers(g).length > 0);
    const deadline = Date.now() + 5_000;
    while ((liveGroupCount() > 0 || leaked().length > 0) && Date.now() < deadline) await Bun.sleep(10);
    const tracked = liveGroupCount();
    const left = leaked();
    if (tracked > 0 || left.length > 0) {
      killAllGroups("SIGKILL");
      for (const g of left) killGroup(g, "SIGKILL");
      throw new Error(`stage processes outlived the test: groups ${left.join(", ") || "(none found)"}; ${tracked} still tracked by the runner`);
    }
  } finally {
    stageGroups.clear();
    removeTempDirs();
  }
}

/** Quotes a path or text for /bin/sh. */
export function shQuote(text: string): string {
  return `'${text.replace(/'/g, `'\\''`)}'`;
}
