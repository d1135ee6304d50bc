/**
 * Forking a run (`atomic fork RUN --at STEP`): a new run that reuses the
 * recorded results of every step before STEP and runs the rest live.
 *
 * STEP names one step of the root run, as `atomic show` prints it: its
 * position (`#3`, or `3`; a step inside a ctx.parallel/ctx.chain group
 * `#4.1`, and a group as a whole `#4`) or its name (`review`), which must
 * then be unique in the run (a name used more than once is refused with the
 * positions to choose from). Steps inside a child workflow are not forking
 * points: fork at the child's step in the root, which runs the whole child
 * again.
 *
 * "Before STEP" is journal order: the steps whose checkpoint was recorded
 * before STEP's first record (its start, or its checkpoint when it has no
 * start). Those results are copied into the new run's journal (the last
 * start record of each, for its attempt and artifact directory, and its
 * checkpoint, with `reusedFrom`), so the new run's replay cursor returns
 * them exactly as a resume would return its own; every other step runs
 * live. This prefix is consistent: a step checkpointed before STEP began
 * had its arguments decided by results checkpointed before it, which are
 * copied too. Steps that were still running when STEP began (a parallel
 * sibling) run again. The old run is only read.
 */

import type { JournalEvent } from "../journal/runs.ts";
import type { StageRow } from "../journal/stage-index.ts";
import { closeMatches } from "../shared/close-matches.ts";
import { UsageError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { EVENT, type StepIdentity } from "./journal-events.ts";

/** Where a run came from, recorded in its `run_started` (and shown by show, runs and the API). */
export interface RunOrigin {
  kind: "rerun" | "fork";
  runId: RunId;
  /** fork: the step the new run went live at (its position, and its name). */
  at?: { position: string; name: string };
}

/** What a fork copies into its new run, and from where. */
export interface ForkSeed {
  origin: RunOrigin;
  /** The old run's events to copy (start records and checkpoints), in journal order. */
  events: JournalEvent[];
  /** The old run's stage index rows of the copied stage checkpoints, by position. */
  stages: Map<string, StageRow>;
}

interface StepSeen extends StepIdentity {
  position: string;
  /** Seq of its first record. */
  firstSeq: number;
  checkpointSeq?: number;
}

/** The root run's steps, by position, in the order they first appear. */
function stepsOf(events: readonly JournalEvent[]): Map<string, StepSeen> {
  const steps = new Map<string, StepSeen>();
  for (const e of events) {
    if (e.key === null || (e.type !== EVENT.stepStarted && e.type !== EVENT.checkpoint)) continue;
    let step = steps.get(e.key);
    if (!step) {
      const p = e.payload as StepIdentity;
      step = { kind: p.kind, name: p.name, args: p.args, position: e.key, firstSeq: e.seq };
      steps.set(e.key, step);
    }
    if (e.type === EVENT.checkpoint) step.checkpointSeq = e.seq;
  }
  return steps;
}

/** The fork point STEP names: its position and name, and the seq from which nothing is reused. */
export function resolveForkPoint(runId: RunId, events: readonly JournalEvent[], at: string): { position: string; name: string; fromSeq: number } {
  const steps = stepsOf(events);
  const text = at.trim();
  const asPosition = text.replace(/^#/, "");
  if (/^\d+(\.\d+)*$/.test(asPosition)) {
    // A step's own position, or a group's: every step under it.
    const inside = [...steps.values()].filter((s) => s.position === asPosition || s.position.startsWith(`${asPosition}.`));
    if (inside.length) {
      const first = inside.reduce((a, b) => (b.firstSeq < a.firstSeq ? b : a));
      const name = first.position === asPosition ? first.name : `group #${asPosition}`;
      return { position: asPosition, name, fromSeq: first.firstSeq };
    }
  } else {
    const named = [...steps.values()].filter((s) => s.name === text);
    if (named.length === 1) return { position: named[0]!.position, name: text, fromSeq: named[0]!.firstSeq };
    if (named.length > 1) {
      throw new UsageError("ambiguous_step", `run ${runId} has ${named.length} steps named ${JSON.stringify(text)}`, {
        hint: `name one by its position: ${named.slice(0, 5).map((s) => `--at '#${s.position}'`).join(", ")}`,
      });
    }
    if (text.includes("/")) {
      throw new UsageError("bad_step", `--at ${JSON.stringify(text)} names a step inside a child workflow; a fork goes live at a step of the root run`, {
        hint: `fork at the child workflow's step instead (atomic show ${runId} lists the steps with their positions)`,
      });
    }
  }
  const labels = [...steps.values()].flatMap((s) => [s.name, `#${s.position}`]);
  const near = closeMatches(text, new Set(labels), 5);
  throw new UsageError("unknown_step", `run ${runId} has no step ${JSON.stringify(text)}`, {
    hint: near.length ? `did you mean ${near.map((x) => JSON.stringify(x)).join(", ")}? (atomic show ${runId} --all lists every step)` : `atomic show ${runId} --all lists its steps`,
  });
}

/** The seed of a fork of `runId` at `at`: the recorded results the new run reuses. */
/** Per position of `positions`: its last start record before its checkpoint, and the checkpoint, in journal order. */
export function recordedResults(events: readonly JournalEvent[], positions: ReadonlySet<string>): JournalEvent[] {
  const lastStart = new Map<string, JournalEvent>();
  const copied: JournalEvent[] = [];
  for (const e of events) {
    if (e.key === null || !positions.has(e.key)) continue;
    if (e.type === EVENT.stepStarted) lastStart.set(e.key, e);
    else if (e.type === EVENT.checkpoint) {
      const start = lastStart.get(e.key);
      if (start) copied.push(start);
      copied.push(e);
    }
  }
  return copied.sort((a, b) => a.seq - b.seq);
}

export function forkSeed(runId: RunId, events: readonly JournalEvent[], stageRows: readonly StageRow[], at: string): ForkSeed {
  const point = resolveForkPoint(runId, events, at);
  const reused = new Set<string>();
  for (const step of stepsOf(events).values()) {
    if (step.checkpointSeq !== undefined && step.checkpointSeq < point.fromSeq) reused.add(step.position);
  }
  const copied = recordedResults(events, reused);
  const stages = new Map<string, StageRow>();
  for (const row of stageRows) if (row.runId === runId && reused.has(row.key)) stages.set(row.key, row);
  return { origin: { kind: "fork", runId, at: { position: point.position, name: point.name } }, events: copied, stages };
}
