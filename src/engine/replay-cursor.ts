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
import { digestMatches, formatDigest } from "./values.ts";
import type { JournalEvent } from "../journal/types.ts";
import {
  EVENT,
  describeStep,
  type CheckpointPayload,
  type StepIdentity,
  type StepStartedPayload,
} from "./journal-events.ts";

/**
 * What the workflow asks for at a position: a step identity, whose `args`
 * may still be the unformatted hash (values.ts argsHash) — a replayed tool
 * step compares it with the recorded digest without formatting it.
 */
export type StepRequest = StepIdentity | (Omit<StepIdentity, "args"> & { args: bigint });

export interface Recorded {
  checkpoint?: CheckpointPayload;
  started?: StepStartedPayload;
  /** Number of attempts recorded as started. */
  attempts: number;
}

/** A position's entry: what was recorded there (if anything) and whether the workflow asked for it yet. */
interface Entry extends Recorded {
  checkpoint: CheckpointPayload | undefined;
  started: StepStartedPayload | undefined;
  claimed: boolean;
}

export class ReplayCursor {
  /**
   * Every position recorded in the journal or claimed in this run: one map
   * lookup per claim (the claimed flag lives on the entry; a claim of a new
   * position adds an entry that records nothing).
   */
  private readonly byPosition = new Map<string, Entry>();
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
      // "4.1.0" has the groups "4" and "4.1"; a top-level position has none.
      for (let dot = key.indexOf("."); dot !== -1; dot = key.indexOf(".", dot + 1)) this.groups.add(key.slice(0, dot));
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
  claim(position: string, request: StepRequest): Recorded | undefined {
    if (this.divergence) throw this.divergence;
    const rec = this.take(position);
    if (!rec) {
      // A group stood here in the first run: fail now, before this step runs and is recorded.
      if (this.groups.has(position)) throw this.diverged(position, describeStep(identity(request)), GROUP);
      return undefined;
    }
    const recorded = rec.checkpoint ?? rec.started;
    if (recorded && !sameStep(recorded, request)) {
      const step = identity(request);
      const argsOnly = recorded.kind === step.kind && recorded.name === step.name;
      throw this.diverged(position, describeStep(step, argsOnly), describeStep(recorded, argsOnly));
    }
    if (rec.checkpoint) this.pendingCheckpoints--;
    return rec;
  }

  /** A ctx.parallel / ctx.chain asks for `position`: a single step recorded there means the code changed. */
  claimGroup(position: string, kind: string): void {
    if (this.divergence) throw this.divergence;
    const rec = this.take(position);
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
      if (rec.checkpoint && !rec.claimed) {
        throw this.diverged(position, "no step (the workflow returned)", describeStep(rec.checkpoint));
      }
    }
  }

  private diverged(position: string, expected: string, recorded: string): NondeterminismError {
    this.divergence = new NondeterminismError(this.runId, position, expected, recorded);
    return this.divergence;
  }

  /**
   * Marks `position` claimed; returns its recorded entry, or undefined when
   * nothing was recorded there. A position is claimed at most once.
   */
  private take(position: string): Entry | undefined {
    const rec = this.byPosition.get(position);
    if (rec === undefined) {
      this.byPosition.set(position, { checkpoint: undefined, started: undefined, attempts: 0, claimed: true });
      return undefined;
    }
    if (rec.claimed) throw new Error(`internal: replay position ${position} claimed twice`);
    rec.claimed = true;
    return rec.checkpoint === undefined && rec.started === undefined ? undefined : rec;
  }

  private entry(position: string): Entry {
    let rec = this.byPosition.get(position);
    if (!rec) {
      rec = { checkpoint: undefined, started: undefined, attempts: 0, claimed: false };
      this.byPosition.set(position, rec);
    }
    return rec;
  }
}

const GROUP = "a group of steps (ctx.parallel or ctx.chain)";

function sameStep(recorded: StepIdentity, request: StepRequest): boolean {
  if (recorded.kind !== request.kind || recorded.name !== request.name) return false;
  return typeof request.args === "string" ? recorded.args === request.args : digestMatches(recorded.args, request.args);
}

function identity(request: StepRequest): StepIdentity {
  const { args } = request;
  return { ...request, args: typeof args === "string" ? args : formatDigest(args) };
}
