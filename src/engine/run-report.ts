/**
 * The read side: what `show`, `logs` and the status page know about a run,
 * folded from its journal events in one pass. Steps are listed in the order
 * they first appeared; a child workflow boundary carries the child's report.
 * Each step keeps its attempt history (start, end, outcome, artifact
 * directory) for timelines, and a stage's usage when its runner reported one.
 */

import { stageLogPath } from "../runners/stage-logs.ts";
import type { StageResult, Usage } from "../sdk/types.ts";
import type { ErrorInfo } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { leaseExpiry, shownStatus } from "../journal/run-status.ts";
import type { Journal, RunRecord, ShownStatus } from "../journal/types.ts";
import {
  EVENT,
  type CheckpointPayload,
  type StepFailedPayload,
  type StepKind,
  type StepStartedPayload,
} from "./journal-events.ts";

export type StepState = "running" | "completed" | "failed" | "stopped";

/** One attempt of a step: a `step_started` up to its `step_failed` or checkpoint. */
export interface AttemptReport {
  attempt: number;
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
  startedAt: number | null;
  endedAt: number | null;
  exitCode?: number | null;
  /** Pool attempt generation of the recorded result (2 = its first worker was lost) and the worker that ran it. */
  generation?: number;
  workerId?: string;
  outputPath?: string;
  errorPath?: string;
  artifactDir?: string;
  error?: ErrorInfo;
  childRunId?: string;
  child?: RunReport;
  result?: unknown;
  /** Attempts with a visible start (stages, child workflows); empty for tools and sleeps. */
  attemptLog: AttemptReport[];
  /** A stage's token and cost usage, when its runner reported one: every recorded attempt (failed ones too), summed. */
  usage?: Usage;
  /** A durable timer's wake-up time. */
  wakeAt?: number;
  /** A stage's warnings (a tool its agent refused). */
  warnings?: string[];
}

export interface RunReport {
  /** Questions (ctx.ask) of this run still waiting for an answer. */
  questions?: { id: string; question: string; choices: string[] | null; deadline: number | null }[];
  run: RunRecord;
  status: ShownStatus;
  leaseExpiresAt?: number;
  holder?: { holderId: string; host: string; pid: number };
  steps: StepReport[];
  /** Stages waiting to start (admission), and why: only while the run is live. */
  waiting?: { position: string; name: string; reason: string; since: number }[];
}

export async function buildRunReport(journal: Journal, runId: RunId, opts: { depth?: number } = {}): Promise<RunReport | undefined> {
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
  for (const e of events) {
    if (e.type === EVENT.stageWaiting) {
      const w = e.payload as { stageKey: string; name: string; reason: string };
      waiting.set(w.stageKey, { position: w.stageKey, name: w.name, reason: w.reason, since: waiting.get(w.stageKey)?.since ?? e.at });
      continue;
    }
    if (e.type === EVENT.usageRecorded) {
      const u = e.payload as { stageKey: string; usage: Usage };
      const step = steps.get(u.stageKey);
      if (step) step.usage = addUsage(step.usage, u.usage);
      continue;
    }
    if (e.key === null) continue;
    if (e.type === EVENT.stepStarted) waiting.delete(e.key);
    const p = e.payload as StepStartedPayload;
    let step = steps.get(e.key);
    if (!step) {
      step = { position: e.key, kind: p.kind, name: p.name, status: "running", attempts: 0, startedAt: e.at, endedAt: null, attemptLog: [] };
      steps.set(e.key, step);
    }
    switch (e.type) {
      case EVENT.stepStarted:
        step.attempts = Math.max(step.attempts + 1, p.attempt ?? 1);
        step.status = "running";
        step.endedAt = null;
        delete step.error;
        if (p.artifactDir) step.artifactDir = p.artifactDir;
        if (p.childRunId) step.childRunId = p.childRunId;
        step.attemptLog.push({
          attempt: step.attempts,
          startedAt: e.at,
          endedAt: null,
          status: "running",
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
        if (open && open.endedAt === null) Object.assign(open, { endedAt: e.at, status: "failed", error: step.error });
        break;
      }
      case EVENT.checkpoint: {
        const c = e.payload as CheckpointPayload & { childRunId?: string };
        step.endedAt = e.at;
        if (c.startedAt) step.startedAt = c.startedAt;
        if (step.attempts === 0) step.attempts = 1;
        if (c.childRunId) step.childRunId = c.childRunId;
        if (p.kind === "stage") {
          const r = c.result as StageResult;
          step.status = r.status === "completed" ? "completed" : "failed";
          step.exitCode = r.exitCode;
          if (r.generation !== undefined) step.generation = r.generation;
          if (r.workerId !== undefined) step.workerId = r.workerId;
          step.outputPath = r.outputPath;
          if (r.errorPath) step.errorPath = r.errorPath;
          if (r.error) step.error = { name: "StageFailed", ...r.error };
          if (r.usage) step.usage = addUsage(step.usage, r.usage);
          if (r.warnings?.length) step.warnings = r.warnings;
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
  if (status !== "running" && !drivenWaiting) {
    for (const step of steps.values()) {
      if (step.status === "running") step.status = "stopped";
      for (const a of step.attemptLog) if (a.status === "running") a.status = "stopped";
    }
  }
  const list = [...steps.values()];
  for (const step of list) {
    if (step.kind === "stage" && step.artifactDir && !step.outputPath) {
      step.outputPath = stageLogPath(step.artifactDir, "stdout");
      step.errorPath = stageLogPath(step.artifactDir, "stderr");
    }
  }
  const depth = opts.depth ?? 3;
  if (depth > 0) {
    for (const step of list) {
      if (step.childRunId) {
        const child = await buildRunReport(journal, step.childRunId as RunId, { depth: depth - 1 });
        if (child) step.child = child;
      }
    }
  }
  const report: RunReport = { run, status, steps: list };
  if (waiting.size > 0 && (status === "running" || status === "paused")) report.waiting = [...waiting.values()];
  const open = (await journal.messages.prompts(run.rootId, "open")).filter((p) => p.runId === run.id);
  if (open.length > 0) report.questions = open.map((p) => ({ id: p.id, question: p.question, choices: p.choices, deadline: p.deadline }));
  const expiry = leaseExpiry(lease);
  if (status === "crashed" && expiry !== undefined) report.leaseExpiresAt = expiry;
  if (lease && status === "running") report.holder = { holderId: lease.holderId, host: lease.host, pid: lease.pid };
  return report;
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
