/**
 * The replay cursor: the one place that decides whether a step already ran.
 *
 * It is built once per run from the journal (O(n) in the number of events)
 * and indexes checkpoints and step starts by replay position. When workflow
 * code asks for a step at a position, `claim()` returns what the journal
 * recorded there, or nothing if the step is new. If a different step was
 * recorded at that position (other kind, name or arguments) it raises the
 * NondeterminismError — from here and nowhere else.
 */

import { NondeterminismError } from "../shared/errors.ts";
import type { JournalEvent } from "../journal/types.ts";
import {
  EVENT,
  describeStep,
  type CheckpointPayload,
  type StepIdentity,
  type StepStartedPayload,
} from "./journal-events.ts";

export interface Recorded {
  checkpoint?: CheckpointPayload;
  started?: StepStartedPayload;
  /** Number of attempts recorded as started. */
  attempts: number;
}

export class ReplayCursor {
  private readonly byPosition = new Map<string, Recorded>();
  private readonly claimed = new Set<string>();
  /** Positions of groups (ctx.parallel/chain): proper prefixes of recorded positions. Groups record nothing themselves. */
  private readonly groups = new Set<string>();
  private pendingCheckpoints = 0;
  /**
   * The first divergence found. Sticky: every later claim raises it again and
   * so does assertFullyReplayed, so workflow code that catches it (or a group
   * that wraps it) cannot replay on past it or end the run any other way.
   */
  divergence: NondeterminismError | undefined;

  constructor(readonly runId: string, events: readonly JournalEvent[] = []) {
    for (const e of events) {
      if (e.key === null) continue;
      if (e.type === EVENT.checkpoint) {
        this.entry(e.key).checkpoint = e.payload as CheckpointPayload;
        this.pendingCheckpoints++;
      } else if (e.type === EVENT.stepStarted) {
        const rec = this.entry(e.key);
        rec.started = e.payload as StepStartedPayload;
        rec.attempts++;
      }
    }
    for (const key of this.byPosition.keys()) {
      const parts = key.split(".");
      for (let n = 1; n < parts.length; n++) this.groups.add(parts.slice(0, n).join("."));
    }
  }

  /** True while recorded checkpoints remain that the workflow has not reached yet. */
  get replaying(): boolean {
    return this.pendingCheckpoints > 0;
  }

  /**
   * The workflow asks for `step` at `position`: returns what was recorded
   * there (checkpoint and/or start), or undefined for a new step.
   */
  claim(position: string, step: StepIdentity): Recorded | undefined {
    if (this.divergence) throw this.divergence;
    const rec = this.byPosition.get(position);
    if (this.claimed.has(position)) {
      throw new Error(`internal: replay position ${position} claimed twice`);
    }
    this.claimed.add(position);
    if (!rec) {
      // A group stood here in the first run: fail now, before this step runs and is recorded.
      if (this.groups.has(position)) throw this.diverged(position, describeStep(step), GROUP);
      return undefined;
    }
    const recorded = rec.checkpoint ?? rec.started;
    if (recorded && !sameStep(recorded, step)) {
      const argsOnly = recorded.kind === step.kind && recorded.name === step.name;
      throw this.diverged(position, describeStep(step, argsOnly), describeStep(recorded, argsOnly));
    }
    if (rec.checkpoint) this.pendingCheckpoints--;
    return rec;
  }

  /** A ctx.parallel / ctx.chain asks for `position`: a single step recorded there means the code changed. */
  claimGroup(position: string, kind: string): void {
    if (this.divergence) throw this.divergence;
    if (this.claimed.has(position)) {
      throw new Error(`internal: replay position ${position} claimed twice`);
    }
    this.claimed.add(position);
    const rec = this.byPosition.get(position);
    const recorded = rec?.checkpoint ?? rec?.started;
    if (recorded) throw this.diverged(position, `a ctx.${kind} group`, describeStep(recorded));
  }

  /**
   * Called when the workflow function returned: a recorded checkpoint that
   * was never asked for means the code took another path than the first run.
   */
  assertFullyReplayed(): void {
    if (this.divergence) throw this.divergence;
    if (this.pendingCheckpoints <= 0) return;
    for (const [position, rec] of this.byPosition) {
      if (rec.checkpoint && !this.claimed.has(position)) {
        throw this.diverged(position, "no step (the workflow returned)", describeStep(rec.checkpoint));
      }
    }
  }

  private diverged(position: string, expected: string, recorded: string): NondeterminismError {
    this.divergence = new NondeterminismError(this.runId, position, expected, recorded);
    return this.divergence;
  }

  private entry(position: string): Recorded {
    let rec = this.byPosition.get(position);
    if (!rec) {
      rec = { attempts: 0 };
      this.byPosition.set(position, rec);
    }
    return rec;
  }
}

const GROUP = "a group of steps (ctx.parallel or ctx.chain)";

function sameStep(a: StepIdentity, b: StepIdentity): boolean {
  return a.kind === b.kind && a.name === b.name && a.args === b.args;
}
