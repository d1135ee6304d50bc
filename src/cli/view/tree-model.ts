/**
 * The live tree's model: runs and their visible steps (stages, child
 * workflows, sleeps) in the order they started; a child run's steps hang
 * under the boundary step that started it. Tool steps are only counted.
 */

import { formatCost } from "../../runners/usage.ts";
import type { EngineEvent } from "../../engine/observer.ts";
import { colorFor, formatDuration, type Style } from "../style.ts";
import type { HostRecord } from "../../journal/fleet.ts";
import { queueWait, queueWaitText, type QueueWait } from "../../journal/fleet-view.ts";

interface StepNode {
  runId: string;
  position: string;
  kind: string;
  name: string;
  status: string;
  attempt: number;
  startedAt: number;
  endedAt?: number;
  childRunId?: string;
  /** Tokens and cost: live deltas while it runs, its recorded usage once it ended. */
  tokens?: number;
  costMicroUsd?: number;
  /** Some of its tokens have no known price (usage.ts formatCost). */
  unpriced?: boolean;
  /** Why it waits to start (admission). */
  waiting?: string;
  /** Queued for a worker host on this queue (no worker of the root's own serves it). */
  hostQueue?: string;
  /** Why no worker host takes it yet (setHosts), if that is why. */
  queueWait?: QueueWait;
}

interface RunNode {
  runId: string;
  workflow: string;
  status: string;
  startedAt: number;
  endedAt?: number;
  steps: StepNode[];
  toolsDone: number;
  toolsReplayed: number;
  /** Tool steps running now, by position: their names. */
  toolsRunning: Map<string, string>;
}

/** A status as one symbol (the console's stage tree uses the same: cli/tui/format.ts). */
export const SYMBOL: Record<string, string> = {
  queued: "○",
  running: "◐",
  completed: "✓",
  failed: "✗",
  cancelled: "⊘",
  interrupted: "⊘",
};

export class TreeModel {
  private readonly runs = new Map<string, RunNode>();
  private rootId: string | undefined;

  apply(e: EngineEvent): void {
    switch (e.type) {
      case "run_started": {
        const run: RunNode = { runId: e.runId, workflow: e.workflow, status: "running", startedAt: e.at, steps: [], toolsDone: 0, toolsReplayed: 0, toolsRunning: new Map() };
        this.runs.set(e.runId, run);
        if (!e.parentId) this.rootId ??= e.runId;
        break;
      }
      case "run_ended": {
        const run = this.runs.get(e.runId);
        if (run) {
          run.status = e.status;
          run.endedAt = e.at;
        }
        break;
      }
      case "step_started": {
        const run = this.runs.get(e.runId);
        if (!run) break;
        if (e.kind === "tool") {
          run.toolsRunning.set(e.position, e.name);
          break;
        }
        let step = run.steps.find((s) => s.position === e.position);
        const status = e.queued ? "queued" : "running";
        if (!step) {
          step = { runId: e.runId, position: e.position, kind: e.kind, name: e.name, status, attempt: e.attempt, startedAt: e.at };
          run.steps.push(step);
        }
        step.status = status;
        step.startedAt = e.at;
        step.attempt = e.attempt;
        delete step.waiting;
        delete step.queueWait;
        if (e.queued && e.hostQueue) step.hostQueue = e.hostQueue;
        else delete step.hostQueue;
        if (e.childRunId) step.childRunId = e.childRunId;
        break;
      }
      case "step_running": {
        // A queued stage left the queue: its timer starts when its worker started it.
        const step = this.runs.get(e.runId)?.steps.find((s) => s.position === e.position);
        if (!step || step.attempt !== e.attempt || step.status !== "queued") break;
        step.status = "running";
        step.startedAt = e.at;
        break;
      }
      case "step_waiting": {
        const run = this.runs.get(e.runId);
        if (!run) break;
        let step = run.steps.find((s) => s.position === e.position);
        if (!step) {
          step = { runId: e.runId, position: e.position, kind: e.kind ?? "stage", name: e.name, status: "waiting", attempt: 1, startedAt: e.at };
          run.steps.push(step);
        }
        step.waiting = e.reason;
        break;
      }
      case "stage_usage": {
        const step = this.runs.get(e.runId)?.steps.find((s) => s.position === e.position);
        if (!step) break;
        const u = e.usage;
        step.tokens = (step.tokens ?? 0) + (u.inputTokens ?? 0) + (u.outputTokens ?? 0) + (u.cacheReadTokens ?? 0) + (u.cacheWriteTokens ?? 0);
        step.costMicroUsd = (step.costMicroUsd ?? 0) + (u.costMicroUsd ?? 0);
        if (u.unpriced) step.unpriced = true;
        break;
      }
      case "step_ended": {
        const run = this.runs.get(e.runId);
        if (!run) break;
        if (e.kind === "tool") {
          run.toolsRunning.delete(e.position);
          if (e.replayed) run.toolsReplayed++;
          else run.toolsDone++;
          break;
        }
        let step = run.steps.find((s) => s.position === e.position);
        if (!step) {
          step = { runId: e.runId, position: e.position, kind: e.kind, name: e.name, status: e.status, attempt: 1, startedAt: e.at };
          run.steps.push(step);
        }
        step.status = e.replayed ? "replayed" : e.status;
        step.endedAt = e.at;
        const u = e.result?.usage;
        if (u) {
          step.tokens = u.inputTokens + u.outputTokens + u.cacheReadTokens + u.cacheWriteTokens;
          step.costMicroUsd = u.costMicroUsd;
          step.unpriced = u.unpriced;
        }
        break;
      }
      default:
        break;
    }
  }

  /** Whether a queued stage waits for a worker host (then the view reads the hosts: host-watch.ts). */
  hostQueued(): boolean {
    for (const run of this.runs.values()) if (run.steps.some((s) => s.status === "queued" && s.hostQueue)) return true;
    return false;
  }

  /** The host registry as read now: why each stage queued for a worker host still waits, if it does. */
  setHosts(hosts: readonly HostRecord[], now: number): void {
    for (const run of this.runs.values()) {
      for (const step of run.steps) {
        const w = step.status === "queued" && step.hostQueue ? queueWait(hosts, step.hostQueue, now) : undefined;
        if (w) step.queueWait = w;
        else delete step.queueWait;
      }
    }
  }

  render(style: Style, now: number): string[] {
    const root = this.rootId ? this.runs.get(this.rootId) : undefined;
    if (!root) return [];
    const lines: string[] = [];
    this.renderRun(root, 0, style, now, lines);
    return lines;
  }

  private renderRun(run: RunNode, depth: number, style: Style, now: number, lines: string[]): void {
    const pad = "  ".repeat(depth);
    const took = formatDuration((run.endedAt ?? now) - run.startedAt);
    lines.push(`${pad}${colorFor(style, run.status)(SYMBOL[run.status] ?? "•")} ${style.bold(run.workflow)} ${style.dim(run.runId)} ${style.dim(took)}`);
    for (const step of run.steps) {
      const status = step.status;
      const sym = status === "replayed" ? "↺" : SYMBOL[status] ?? "•";
      const elapsed = step.endedAt === undefined ? now - step.startedAt : step.endedAt - step.startedAt;
      const attempt = step.attempt > 1 ? style.dim(` attempt ${step.attempt}`) : "";
      const label = step.kind === "stage" ? step.name : `${step.kind} ${step.name}`;
      const usage = step.tokens !== undefined ? style.dim(`  ${compact(step.tokens)} tok ${formatCost({ costMicroUsd: step.costMicroUsd ?? 0, inputTokens: step.tokens, unpriced: step.unpriced })}`) : "";
      if (step.waiting && status === "waiting") {
        lines.push(`${pad}  ${style.yellow("…")} ${label} ${style.dim(`waiting: ${step.waiting}`)}`);
        continue;
      }
      // Queued: waiting for a free worker, so no timer runs yet.
      const when = status === "replayed" || status === "queued" ? status : formatDuration(elapsed);
      const why = status === "queued" && step.queueWait ? `  ${style.yellow(queueWaitText(step.queueWait, now))}` : "";
      lines.push(`${pad}  ${colorFor(style, status)(sym)} ${label} ${style.dim(when)}${attempt}${usage}${why}`);
      const child = step.childRunId ? this.runs.get(step.childRunId) : undefined;
      if (child) this.renderRun(child, depth + 2, style, now, lines);
    }
    if (run.toolsDone + run.toolsReplayed + run.toolsRunning.size > 0) {
      const replayed = run.toolsReplayed ? `, ${run.toolsReplayed} replayed` : "";
      const names = [...run.toolsRunning.values()];
      const running = names.length ? `, running: ${names.slice(0, 3).join(", ")}${names.length > 3 ? ` and ${names.length - 3} more` : ""}` : "";
      lines.push(`${pad}  ${style.dim(`tools: ${run.toolsDone} done${replayed}${running}`)}`);
    }
  }
}

/** A token count in few characters (12.3k, 1.2M). */
export function compact(n: number): string {
  return n >= 1_000_000 ? `${(n / 1_000_000).toFixed(1)}M` : n >= 1_000 ? `${(n / 1_000).toFixed(1)}k` : String(n);
}
