/**
 * The read side: what `show`, `logs` and the status page know about a run,
 * folded from its journal events in one pass. Steps are listed in the order
 * they first appeared; a child workflow boundary carries the child's report.
 * Each step keeps its attempt history (start, end, outcome, artifact
 * directory) for timelines, and a stage's usage when its runner reported one.
 */

import { isContinued, predecessorIn, successorIn } from "./chain.ts";
import type { RunOrigin } from "./fork.ts";
import { stageLogPath } from "../artifacts/stage-logs.ts";
import type { StageCleanup, StageResult, Usage } from "../sdk/types.ts";
import type { ErrorInfo } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { crashCause, leaseExpiry, shownStatus } from "../journal/run-status.ts";
import type { Journal } from "../journal/journal.ts";
import type { RunRecord, ShownStatus } from "../journal/runs.ts";
import { hostOfWorker } from "../journal/fleet-view.ts";
import { pausedStages } from "../journal/run-control.ts";
import {
  EVENT,
  type CheckpointPayload,
  type StepFailedPayload,
  type StepKind,
  type StepStartedPayload,
} from "./journal-events.ts";

/**
 * queued: a stage attempt waits for a free worker (on the pool); running from when a worker started it.
 * waiting: a ctx.sleep whose wake-up time has not come (or that was stopped before it came).
 */
export type StepState = "queued" | "running" | "completed" | "failed" | "stopped" | "waiting";

/**
 * One attempt of a step: a `step_started` up to its `step_failed` or
 * checkpoint. A pooled stage attempt is queued from `queuedAt` (when the
 * workflow started it: admission may have held it back before its
 * step_started) until `startedAt` (its stage_running, when a worker started
 * it); until then `startedAt` equals `queuedAt`. An attempt run in the
 * root that had to wait for admission (stage_waiting) is queued from that
 * wait. Time queued is startedAt - queuedAt, time running endedAt - startedAt.
 */
export interface AttemptReport {
  attempt: number;
  queuedAt?: number;
  startedAt: number;
  endedAt: number | null;
  status: StepState;
  artifactDir?: string;
  error?: ErrorInfo;
}

export interface StepReport {
  position: string;
  kind: StepKind;
  name: string;
  status: StepState;
  attempts: number;
  /** When its first attempt entered the worker queue (pooled stages). */
  queuedAt?: number;
  /** When it started running (its first attempt; while queued, when it was queued). */
  startedAt: number | null;
  endedAt: number | null;
  exitCode?: number | null;
  /** Pool attempt generation of the recorded result (2 = its first worker was lost) and the worker that ran it. */
  generation?: number;
  workerId?: string;
  /** Where its recorded result ran: a worker host (its worker id's part after `@`), or the root's machine (its own pool). */
  ranOn?: { host: string; remote: boolean };
  /** A queued attempt only worker hosts can run: the queue it waits on. */
  hostQueue?: string;
  /** Why that attempt still waits, when no live host serves its queue (queue-waits.ts; absent until asked). */
  queueWait?: string;
  outputPath?: string;
  errorPath?: string;
  artifactDir?: string;
  error?: ErrorInfo;
  childRunId?: string;
  child?: RunReport;
  result?: unknown;
  /** Attempts with a visible start (stages, tools, child workflows), each failed one with its error; empty for sleeps. */
  attemptLog: AttemptReport[];
  /** A stage's token and cost usage, when its runner reported one: every recorded attempt (failed ones too), summed. */
  usage?: Usage;
  /** A durable timer's wake-up time (its endedAt once it has woken; `waiting` until then). */
  wakeAt?: number;
  /** A stage's warnings (a tool its agent refused). */
  warnings?: string[];
  /** Processes of the stage that outlived its cleanup (worker_cleanup_unconfirmed), named, found and killed by its worker. */
  cleanup?: StageCleanup;
  /** A fork's step whose recorded result was copied from this run (fork.ts), not run again. */
  reusedFrom?: string;
  /** A stage's git worktree, as its start record says (engine/stage-workspace.ts). */
  workspace?: { repo: string; path: string; cwd: string; branch: string; base: string; baseCommit: string };
  /** A stage's runner, as its last start record says. */
  runner?: string;
}

export interface RunReport {
  /** Questions (ctx.ask) of this run still waiting for an answer. */
  questions?: { id: string; question: string; choices: string[] | null; deadline: number | null }[];
  run: RunRecord;
  status: ShownStatus;
  /** A root run's tags (journal/tags.ts), when it has any. */
  tags?: Record<string, string>;
  /** Where the run came from: the run it reruns or forks (fork.ts), from its run_started. */
  origin?: RunOrigin;
  /** A run of a chain (ctx.continueAsNew, chain.ts): the run it continues, and the run that continued it. */
  continuedFrom?: RunId;
  continuedAs?: RunId;
  leaseExpiresAt?: number;
  /** A crashed run: why (run-status.ts crashCause). */
  crashCause?: "driver_gone" | "lease_expired";
  /** A crashed run: when its driver last renewed its lease (its duration ends there or at its last event). */
  leaseRenewedAt?: number;
  holder?: { holderId: string; host: string; pid: number };
  steps: StepReport[];
  /** Stages waiting to start (admission, a paused stage) or, paused, after a turn, and why: only while the run is live. */
  waiting?: { position: string; name: string; reason: string; since: number }[];
  /** A live root run's paused stages (atomic pause RUN STAGE), by path, as its driver applied the requests. */
  pausedStages?: string[];
}

export async function buildRunReport(journal: Journal, runId: RunId, opts: { depth?: number; driveHost?: string } = {}): Promise<RunReport | undefined> {
  const run = await journal.getRun(runId);
  if (!run) return undefined;
  const lease = await journal.getLease(run.rootId);
  const rootRun = run.parentId ? await journal.getRun(run.rootId) : run;
  // A child's liveness is its root's: the root's driver runs it.
  let status = shownStatus(run, lease);
  if (run.parentId && rootRun && status === "running" && shownStatus(rootRun, lease) === "crashed") status = "crashed";
  const events = await journal.readEvents(runId);
  const steps = new Map<string, StepReport>();
  const waiting = new Map<string, { position: string; name: string; reason: string; since: number }>();
  let lastEventAt = 0;
  let origin: RunOrigin | undefined;
  // The host of the drive recording these events (run_started, each run_resumed; a child's: its parent's drive
  // when the child started), where the root's own pool ran its stages. Runs recorded before run_started named
  // it: the lease's last holder.
  let driveHost = opts.driveHost ?? lease?.host;
  const childDriveHosts = new Map<string, string | undefined>();
  const applied: string[] = [];
  for (const e of events) {
    lastEventAt = Math.max(lastEventAt, e.at);
    if (e.type === EVENT.controlApplied) applied.push(String((e.payload as { action?: unknown }).action ?? ""));
    if (e.type === EVENT.runStarted || e.type === EVENT.runResumed) driveHost = (e.payload as { host?: string }).host ?? driveHost;
    if (e.type === EVENT.runStarted) origin = (e.payload as { origin?: RunOrigin }).origin;
    if (e.type === EVENT.stageWaiting) {
      // `over`: a running stage that waited (paused after its turn) goes on.
      const w = e.payload as { stageKey: string; name: string; reason: string; over?: boolean };
      if (w.over) waiting.delete(w.stageKey);
      else waiting.set(w.stageKey, { position: w.stageKey, name: w.name, reason: w.reason, since: waiting.get(w.stageKey)?.since ?? e.at });
      continue;
    }
    if (e.type === EVENT.stageRunning) {
      const r = e.payload as { stageKey: string; attempt: number; at: number };
      const step = steps.get(r.stageKey);
      const open = step?.attemptLog.find((a) => a.attempt === r.attempt);
      if (!step || !open || open.status !== "queued") continue;
      open.status = "running";
      open.startedAt = r.at;
      step.startedAt ??= r.at;
      if (step.attemptLog.at(-1) === open) step.status = "running";
      continue;
    }
    if (e.type === EVENT.usageRecorded) {
      const u = e.payload as { stageKey: string; usage: Usage };
      const step = steps.get(u.stageKey);
      if (step) step.usage = addUsage(step.usage, u.usage);
      continue;
    }
    if (e.key === null) continue;
    const queuedAt = e.type === EVENT.stepStarted ? waiting.get(e.key)?.since : undefined;
    if (e.type === EVENT.stepStarted || e.type === EVENT.checkpoint || e.type === EVENT.stepFailed) waiting.delete(e.key);
    const p = e.payload as StepStartedPayload;
    let step = steps.get(e.key);
    const at = e.type === EVENT.stepStarted && typeof p.startedAt === "number" ? p.startedAt : e.at;
    if (!step) {
      step = { position: e.key, kind: p.kind, name: p.name, status: "running", attempts: 0, startedAt: at, endedAt: null, attemptLog: [] };
      steps.set(e.key, step);
    }
    switch (e.type) {
      case EVENT.stepStarted:
        step.attempts = Math.max(step.attempts + 1, p.attempt ?? 1);
        step.status = p.queued ? "queued" : "running";
        if (p.queued && step.attemptLog.length === 0) {
          step.queuedAt = p.requestedAt ?? e.at;
          step.startedAt = null; // not started yet: nothing to time
        }
        step.endedAt = null;
        delete step.error;
        if (p.artifactDir) step.artifactDir = p.artifactDir;
        if (p.workspace) step.workspace = p.workspace;
        if (typeof p.runner === "string") step.runner = p.runner;
        if (p.childRunId) step.childRunId = p.childRunId;
        if (p.childRunId) childDriveHosts.set(p.childRunId, driveHost);
        if (p.queued && p.hostQueue) step.hostQueue = p.hostQueue;
        else delete step.hostQueue;
        step.attemptLog.push({
          attempt: step.attempts,
          startedAt: p.queued ? (p.requestedAt ?? at) : at,
          endedAt: null,
          status: p.queued ? "queued" : "running",
          // Queued from when the workflow started it (a pooled attempt, admission included), else from its admission wait.
          ...(p.queued ? { queuedAt: p.requestedAt ?? e.at } : queuedAt !== undefined ? { queuedAt } : {}),
          ...(p.artifactDir ? { artifactDir: p.artifactDir } : {}),
        });
        break;
      case EVENT.stepFailed: {
        step.status = "failed";
        step.endedAt = e.at;
        step.error = (e.payload as StepFailedPayload).error;
        const failedUsage = (e.payload as { usage?: Usage }).usage;
        if (failedUsage) step.usage = addUsage(step.usage, failedUsage);
        const open = step.attemptLog.at(-1);
        // A stage attempt's failure knows when its worker started it (a short one has no stage_running).
        const began = (e.payload as { startedAt?: unknown }).startedAt;
        if (open && open.endedAt === null && open.queuedAt !== undefined && typeof began === "number" && began >= open.queuedAt) {
          open.startedAt = began;
          step.startedAt ??= began;
        }
        if (open && open.endedAt === null) Object.assign(open, { endedAt: e.at, status: "failed", error: step.error });
        break;
      }
      case EVENT.checkpoint: {
        const c = e.payload as CheckpointPayload & { childRunId?: string; reusedFrom?: string };
        if (c.reusedFrom) step.reusedFrom = c.reusedFrom;
        step.endedAt = e.at;
        if (c.startedAt) step.startedAt = c.startedAt;
        const last = step.attemptLog.at(-1);
        // The checkpoint knows when its attempt really started, should its stage_running have been lost.
        if (c.startedAt && last?.status === "queued") last.startedAt = c.startedAt;
        if (step.attempts === 0) step.attempts = 1;
        if (c.childRunId) step.childRunId = c.childRunId;
        if (p.kind === "stage") {
          const r = c.result as StageResult;
          step.status = r.status === "completed" ? "completed" : "failed";
          step.exitCode = r.exitCode;
          if (r.generation !== undefined) step.generation = r.generation;
          if (r.workerId !== undefined) {
            step.workerId = r.workerId;
            const remote = hostOfWorker(r.workerId);
            if (remote !== undefined) step.ranOn = { host: remote, remote: true };
            else if (driveHost) step.ranOn = { host: driveHost, remote: false };
          }
          step.outputPath = r.outputPath;
          if (r.errorPath) step.errorPath = r.errorPath;
          if (r.error) step.error = { name: "StageFailed", ...r.error };
          if (r.usage) step.usage = addUsage(step.usage, r.usage);
          if (r.warnings?.length) step.warnings = r.warnings;
          if (r.cleanup) step.cleanup = r.cleanup;
        } else if (p.kind === "sleep") {
          step.status = "completed";
          const wakeAt = (c.result as { wakeAt?: unknown } | undefined)?.wakeAt;
          if (typeof wakeAt === "number") step.wakeAt = wakeAt;
        } else if (p.kind === "tool") {
          const r = c.result as { value?: unknown; error?: { code: string; message: string } };
          step.status = r.error ? "failed" : "completed";
          if (r.error) step.error = { name: "ToolFailed", ...r.error };
          else step.result = r.value;
        } else {
          step.status = "completed";
          if (p.kind === "child") step.result = c.result;
        }
        const open = step.attemptLog.at(-1);
        if (open && open.endedAt === null) {
          open.endedAt = e.at;
          open.status = step.status;
          if (step.error) open.error = step.error;
        }
        break;
      }
    }
  }
  // Steps still "running" in a run nobody drives were stopped mid-way. A run waiting for an answer, or paused (its
  // running stages go on), may still be driven.
  const drivenWaiting =
    (status === "awaiting_input" || status === "paused") && lease !== undefined && lease.renewedAt + lease.timeoutMs >= Date.now();
  // They keep the time they had when the run stopped: when it ended, or (crashed) when it was last known alive.
  if (status !== "running" && !drivenWaiting) {
    const stoppedAt = run.endedAt ?? Math.max(events.at(-1)?.at ?? run.updatedAt, lease?.renewedAt ?? 0);
    for (const step of steps.values()) {
      if (step.status === "running" || step.status === "queued") {
        step.status = "stopped";
        step.endedAt = Math.max(stoppedAt, step.startedAt ?? 0);
      }
      for (const a of step.attemptLog) {
        if (a.status !== "running" && a.status !== "queued") continue;
        a.status = "stopped";
        a.endedAt = Math.max(stoppedAt, a.startedAt);
      }
    }
  }
  const live = status === "running" || drivenWaiting;
  const sleeps = [...steps.values()].filter((x) => x.kind === "sleep" && x.wakeAt !== undefined);
  for (const step of sleeps) settleSleep(step, step.wakeAt!, live ? Date.now() >= step.wakeAt! : run.status === "completed" || lastEventAt >= step.wakeAt! || movedPast(step.position, steps.keys()));
  const list = [...steps.values()];
  for (const step of list) {
    if (step.status !== "queued") delete step.hostQueue;
    if (step.kind === "stage" && step.artifactDir && !step.outputPath) {
      step.outputPath = stageLogPath(step.artifactDir, "stdout");
      step.errorPath = stageLogPath(step.artifactDir, "stderr");
    }
  }
  const depth = opts.depth ?? 3;
  if (depth > 0) {
    for (const step of list) {
      if (step.childRunId) {
        const driveHostOfChild = childDriveHosts.get(step.childRunId) ?? driveHost;
        const child = await buildRunReport(journal, step.childRunId as RunId, { depth: depth - 1, ...(driveHostOfChild ? { driveHost: driveHostOfChild } : {}) });
        if (child) step.child = child;
      }
    }
  }
  const tags = run.parentId === null ? (await journal.tags.of([run.id])).get(run.id) : undefined;
  const report: RunReport = { run, status, steps: list, ...(origin ? { origin } : {}), ...(tags ? { tags } : {}) };
  const continuedFrom = run.parentId === null ? predecessorIn(events) : undefined;
  const continuedAs = isContinued(run) ? successorIn(events) : undefined;
  if (continuedFrom) report.continuedFrom = continuedFrom;
  if (continuedAs) report.continuedAs = continuedAs;
  if (waiting.size > 0 && (status === "running" || status === "paused")) report.waiting = [...waiting.values()];
  const paused = run.parentId === null && (status === "running" || status === "paused" || status === "awaiting_input") ? pausedStages(applied) : undefined;
  if (paused?.size) report.pausedStages = [...paused];
  const open = (await journal.messages.prompts(run.rootId, "open")).filter((p) => p.runId === run.id);
  if (open.length > 0) report.questions = open.map((p) => ({ id: p.id, question: p.question, choices: p.choices, deadline: p.deadline }));
  const expiry = leaseExpiry(lease);
  if (status === "crashed" && expiry !== undefined) report.leaseExpiresAt = expiry;
  if (status === "crashed" && lease) report.leaseRenewedAt = lease.renewedAt;
  if (status === "crashed") report.crashCause = crashCause(lease);
  if (lease && status === "running") report.holder = { holderId: lease.holderId, host: lease.host, pid: lease.pid };
  return report;
}

/**
 * A sleep's checkpoint is written before its wait, so it says nothing about
 * whether the sleep woke. It did when the run is live and the time has
 * come, or when the run is not live but went on past it: it completed,
 * recorded anything at or after the wake-up time, or started a later step
 * of the sleep's own sequence (a resumed sleep may end before its wake-up
 * time when the clock was set back: steps/sleep.ts). Otherwise it is
 * `waiting`: still sleeping, or stopped (Ctrl-C, crash) before it woke.
 */
function settleSleep(step: StepReport, wakeAt: number, woke: boolean): void {
  step.status = woke ? "completed" : "waiting";
  step.endedAt = woke ? wakeAt : null;
}

/** Whether a step came after the one at `position` in the same sequence ("1.0.2" → "1.0.3", "1.0.4.1.0"...). */
function movedPast(position: string, positions: Iterable<string>): boolean {
  const own = position.split(".");
  const last = own.length - 1;
  const prefix = own.slice(0, last).join(".");
  for (const other of positions) {
    const parts = other.split(".");
    if (parts.length < own.length || parts.slice(0, last).join(".") !== prefix) continue;
    if (Number(parts[last]) > Number(own[last])) return true;
  }
  return false;
}

/** Usage of several attempts: integer sums, so totals are exact. */
function addUsage(a: Usage | undefined, b: Usage): Usage {
  if (!a) return { ...b };
  const out: Usage = {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    cacheReadTokens: a.cacheReadTokens + b.cacheReadTokens,
    cacheWriteTokens: a.cacheWriteTokens + b.cacheWriteTokens,
    costMicroUsd: a.costMicroUsd + b.costMicroUsd,
    turns: a.turns + b.turns,
  };
  const model = b.model ?? a.model;
  if (model) out.model = model;
  if (a.estimated || b.estimated) out.estimated = true;
  if (a.unpriced || b.unpriced) out.unpriced = true;
  return out;
}

/** Every stage in a report, depth first, with its path of names ("review/security"). */
export function flattenStages(report: RunReport, prefix = ""): (StepReport & { path: string })[] {
  const out: (StepReport & { path: string })[] = [];
  for (const step of report.steps) {
    const path = prefix ? `${prefix}/${step.name}` : step.name;
    if (step.kind === "stage") out.push({ ...step, path });
    if (step.child) out.push(...flattenStages(step.child, path));
  }
  return out;
}
