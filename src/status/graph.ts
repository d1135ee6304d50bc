/**
 * The stage graph of a run, derived from replay positions alone.
 *
 * Positions say how the workflow code awaited its steps: the n-th step of a
 * scope ("3") follows the (n-1)-th ("2"); a ctx.parallel/ctx.chain at
 * position "4" gives each branch a scope of its own ("4.0.*", "4.1.*").
 * So a run's steps form a series-parallel graph:
 *
 * - `seq`: blocks one after another; each block's exits lead to the next
 *   block's entries.
 * - `par`: the branches of one group, side by side; they fan out from the
 *   block before and join into the block after. Two groups in a row get a
 *   `join` node between them, so their edges stay n + m rather than n * m.
 * - `node`: one step (stage, tool, sleep, or a child workflow boundary,
 *   which carries the child run's own graph as a nested group).
 *
 * The journal does not record whether a group was a parallel or a chain (a
 * group records nothing; its steps do). A group whose branches ran strictly
 * one after another (each began at or after the previous one ended, and
 * time passed; a stage begins when the workflow started it, queued for a
 * worker or not) is drawn as a chain; otherwise as a fan-out. That is what
 * happened, which is what the graph is for: a parallel with concurrency 1
 * is, in fact, a chain.
 *
 * `edges` lists every arrow (node id to node id); the page lays the blocks
 * out recursively and draws those edges. Node ids are `<run id>:<position>`.
 */

import type { RunReport, StepReport } from "../engine/run-report.ts";
import type { StepKind } from "../engine/journal-events.ts";
import type { ShownStatus } from "../journal/runs.ts";

/** queued: a stage waiting for a free worker (run-report.ts); its `startedAt` is null until it starts. */
export type NodeStatus = "queued" | "running" | "completed" | "failed" | "stopped";

export interface GraphNode {
  id: string;
  runId: string;
  position: string;
  kind: StepKind | "join";
  name: string;
  status: NodeStatus;
  attempts: number;
  /** When a pooled stage entered the worker queue (it waited there until startedAt). */
  queuedAt?: number;
  startedAt: number | null;
  endedAt: number | null;
  /** A child workflow boundary: the child run, drawn as a nested group. */
  group?: { runId: string; workflow: string; status: ShownStatus; body: GraphBlock };
}

export type GraphBlock =
  | { type: "node"; node: GraphNode }
  | { type: "seq"; items: GraphBlock[] }
  | { type: "par"; runId: string; position: string; branches: GraphBlock[] };

export interface GraphEdge {
  from: string;
  to: string;
}

export interface RunGraph {
  root: GraphBlock;
  edges: GraphEdge[];
  /** Nodes of every kind, nested groups included. */
  nodeCount: number;
}

export function buildRunGraph(report: RunReport, now = Date.now()): RunGraph {
  const root = runBlock(report, now);
  const edges: GraphEdge[] = [];
  const count = { nodes: 0 };
  wire(root, edges, count);
  return { root, edges, nodeCount: count.nodes };
}

// ---------------------------------------------------------------- blocks from positions

interface ScopeEntry {
  step?: StepReport;
  branches: Map<number, Map<number, ScopeEntry>>;
}

function runBlock(report: RunReport, now: number): GraphBlock {
  const top = new Map<number, ScopeEntry>();
  for (const step of report.steps) insert(top, step.position.split(".").map(Number), step);
  return scopeBlock(top, report, now);
}

function insert(scope: Map<number, ScopeEntry>, segments: number[], step: StepReport): void {
  const [index, branch, ...rest] = segments;
  if (index === undefined || !Number.isInteger(index)) return;
  let entry = scope.get(index);
  if (!entry) scope.set(index, (entry = { branches: new Map() }));
  if (branch === undefined) {
    entry.step = step;
    return;
  }
  let inner = entry.branches.get(branch);
  if (!inner) entry.branches.set(branch, (inner = new Map()));
  insert(inner, rest, step);
}

function scopeBlock(scope: Map<number, ScopeEntry>, report: RunReport, now: number): GraphBlock {
  const items: GraphBlock[] = [];
  const indexes = [...scope.keys()].sort((a, b) => a - b);
  for (const index of indexes) {
    const entry = scope.get(index)!;
    if (entry.step) {
      items.push({ type: "node", node: stepNode(entry.step, report, now) });
      continue;
    }
    const branchIndexes = [...entry.branches.keys()].sort((a, b) => a - b);
    const branches = branchIndexes.map((b) => scopeBlock(entry.branches.get(b)!, report, now));
    const position = groupPosition(entry);
    if (ranOneAfterAnother(branches)) {
      for (const b of branches) items.push(...(b.type === "seq" ? b.items : [b]));
    } else {
      items.push({ type: "par", runId: report.run.id, position, branches });
    }
  }
  // Two fan-outs in a row meet in a join node (n + m edges instead of n * m).
  const joined: GraphBlock[] = [];
  for (const item of items) {
    const prev = joined.at(-1);
    if (prev?.type === "par" && item.type === "par") joined.push({ type: "node", node: joinNode(report.run.id, prev) });
    joined.push(item);
  }
  return joined.length === 1 ? joined[0]! : { type: "seq", items: joined };
}

/** The position of the group an entry stands for, read off any step inside it. */
function groupPosition(entry: ScopeEntry): string {
  for (const inner of entry.branches.values()) {
    for (const e of inner.values()) {
      if (e.step) return e.step.position.split(".").slice(0, -2).join(".");
      const deeper = groupPosition(e);
      if (deeper) return deeper.split(".").slice(0, -2).join(".");
    }
  }
  return "";
}

function stepNode(step: StepReport, report: RunReport, now: number): GraphNode {
  // A sleep that has not woken (StepState "waiting") runs while its run does, else it was stopped before it woke.
  let status: NodeStatus = step.status === "waiting" ? (report.status === "running" ? "running" : "stopped") : step.status;
  let endedAt = step.endedAt;
  if (step.kind === "sleep" && step.wakeAt !== undefined) {
    endedAt = step.wakeAt;
    if (step.wakeAt > now && report.status === "running") status = "running";
  }
  const node: GraphNode = {
    id: `${report.run.id}:${step.position}`,
    runId: report.run.id,
    position: step.position,
    kind: step.kind,
    name: step.name,
    status,
    attempts: step.attempts,
    ...(step.queuedAt !== undefined ? { queuedAt: step.queuedAt } : {}),
    startedAt: step.startedAt,
    endedAt: status === "running" || status === "queued" ? null : endedAt,
  };
  if (step.child) {
    node.group = { runId: step.child.run.id, workflow: step.child.run.workflowName, status: step.child.status, body: runBlock(step.child, now) };
  }
  return node;
}

function joinNode(runId: string, before: Extract<GraphBlock, { type: "par" }>): GraphNode {
  const exits: GraphNode[] = [];
  collectNodes(before, exits);
  const done = exits.every((n) => n.status === "completed");
  const failed = exits.some((n) => n.status === "failed");
  const stopped = exits.some((n) => n.status === "stopped");
  return {
    id: `${runId}:${before.position}:join`,
    runId,
    position: `${before.position}:join`,
    kind: "join",
    name: "",
    status: failed ? "failed" : stopped ? "stopped" : done ? "completed" : "running",
    attempts: 0,
    startedAt: null,
    endedAt: null,
  };
}

function collectNodes(block: GraphBlock, out: GraphNode[]): void {
  if (block.type === "node") out.push(block.node);
  else if (block.type === "seq") for (const b of block.items) collectNodes(b, out);
  else for (const b of block.branches) collectNodes(b, out);
}

/** Branches that ran strictly one after another (see the file comment): a chain. */
function ranOneAfterAnother(branches: GraphBlock[]): boolean {
  if (branches.length < 2) return branches.length === 1;
  const spans = branches.map(span);
  let timePassed = false;
  for (let i = 0; i < spans.length; i++) {
    const s = spans[i]!;
    if (s.start === null) return false;
    if (s.end !== null && s.end > s.start) timePassed = true;
    if (i === 0) continue;
    const prevEnd = spans[i - 1]!.end;
    if (prevEnd === null || s.start < prevEnd) return false;
    if (s.start > prevEnd) timePassed = true;
  }
  return timePassed;
}

function span(block: GraphBlock): { start: number | null; end: number | null } {
  const nodes: GraphNode[] = [];
  collectNodes(block, nodes);
  let start: number | null = null;
  let end: number | null = 0;
  for (const n of nodes) {
    if (n.kind === "join") continue;
    // When the workflow started it (a stage queued for a worker was started then): a fan-out whose stages
    // waited for workers in turn is still a fan-out; a chain starts each only after the one before ended.
    const began = n.queuedAt ?? n.startedAt;
    if (began !== null) start = start === null ? began : Math.min(start, began);
    if (n.endedAt === null || n.status === "running" || n.status === "queued") end = null;
    else if (end !== null) end = Math.max(end, n.endedAt);
  }
  return { start, end };
}

// ---------------------------------------------------------------- edges

interface Ends {
  entry: string[];
  exit: string[];
}

function wire(block: GraphBlock, edges: GraphEdge[], count: { nodes: number }): Ends {
  switch (block.type) {
    case "node": {
      count.nodes++;
      if (block.node.group) wire(block.node.group.body, edges, count);
      return { entry: [block.node.id], exit: [block.node.id] };
    }
    case "seq": {
      let first: Ends | undefined;
      let prev: Ends | undefined;
      for (const item of block.items) {
        const ends = wire(item, edges, count);
        if (ends.entry.length === 0) continue;
        if (prev) for (const from of prev.exit) for (const to of ends.entry) edges.push({ from, to });
        first ??= ends;
        prev = ends;
      }
      return { entry: first?.entry ?? [], exit: prev?.exit ?? [] };
    }
    case "par": {
      const ends: Ends = { entry: [], exit: [] };
      for (const b of block.branches) {
        const e = wire(b, edges, count);
        ends.entry.push(...e.entry);
        ends.exit.push(...e.exit);
      }
      return ends;
    }
  }
}
