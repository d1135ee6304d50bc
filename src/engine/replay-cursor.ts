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
import { argsLike, digestMatches, sameArgs } from "./values.ts";
import type { JournalEvent } from "../journal/runs.ts";
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
  /** The error codes of the attempts recorded as failed, oldest first (a stage's retries go on from them: steps/stage-retries.ts). */
  failures?: readonly string[];
}

/** A position's entry: what was recorded there (if anything) and whether the workflow asked for it yet. */
interface Entry extends Recorded {
  checkpoint: CheckpointPayload | undefined;
  started: StepStartedPayload | undefined;
  /** Made at a position's first recorded failure only (most positions have none). */
  failures?: string[];
  claimed: boolean;
  /** Entries in the order they were created (journal order for recorded positions). */
  order: number;
}

export class ReplayCursor {
  /**
   * An entry for every position recorded in the journal or claimed in this
   * run: one lookup per claim (the claimed flag lives on the entry; a claim
   * of a new position adds an entry that records nothing). Top-level
   * positions ("0", "1", ...) are indexes into an array; the others
   * ("4.0.1", or a top-level one far past the rest) are keys of a map.
   * Hashing every position string into one map was a third of the replay
   * cursor's cost.
   */
  private readonly topLevel: (Entry | undefined)[] = [];
  private readonly nested = new Map<string, Entry>();
  private entries = 0;
  /** Positions of groups (ctx.parallel/chain): proper prefixes of recorded positions. Groups record nothing themselves. */
  private readonly groups = new Set<string>();
  private pendingCheckpoints = 0;
  /** The patch ids the history holds markers of (ctx.patched: ./steps/patch.ts). */
  readonly patches = new Set<string>();
  /** The hand-over the history recorded (ctx.continueAsNew: ./steps/continue-as-new.ts), if any. */
  continuedAs: { next: string; inputs: Record<string, unknown> } | undefined;
  /**
   * The first divergence found. Sticky: every later claim raises it again and
   * so does assertFullyReplayed, so workflow code that catches it (or a group
   * that wraps it) cannot replay on past it or end the run any other way.
   */
  divergence: NondeterminismError | undefined;

  /**
   * Called when the workflow asks for a step that has no recorded result
   * (it would run live now): a replay that must run nothing live (`atomic
   * replay`, src/testing/replay.ts) stops the run there.
   */
  beyondHistory: ((position: string, step: StepIdentity) => void) | undefined;

  constructor(readonly runId: string, events: readonly JournalEvent[] = []) {
    for (const e of events) {
      if (e.type === EVENT.patchRecorded) this.patches.add((e.payload as { patchId: string }).patchId);
      else if (e.type === EVENT.continuedAsNew) this.continuedAs = e.payload as { next: string; inputs: Record<string, unknown> };
      if (e.key === null) continue;
      if (e.type === EVENT.checkpoint) {
        this.entry(e.key).checkpoint = e.payload as CheckpointPayload;
        this.pendingCheckpoints++;
      } else if (e.type === EVENT.stepStarted) {
        const rec = this.entry(e.key);
        rec.started = e.payload as StepStartedPayload;
        rec.attempts++;
      } else if (e.type === EVENT.stepFailed) {
        (this.entry(e.key).failures ??= []).push((e.payload as { error?: { code?: string } }).error?.code ?? "failed");
      }
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
      this.beyondHistory?.(position, identity(request));
      return undefined;
    }
    const recorded = rec.checkpoint ?? rec.started;
    if (recorded && !sameStep(recorded, request)) {
      // Started, never completed (it failed, or ran when the process died): it runs again as the code asks now.
      if (!rec.checkpoint && fixedStep(recorded, request)) return { attempts: rec.attempts, failures: rec.failures };
      const step = identity(request, recorded);
      const argsOnly = recorded.kind === step.kind && recorded.name === step.name;
      throw this.diverged(position, describeStep(step, argsOnly), describeStep(recorded, argsOnly));
    }
    if (rec.checkpoint) this.pendingCheckpoints--;
    else this.beyondHistory?.(position, identity(request, recorded));
    return rec;
  }

  /** What was recorded at `position`, without claiming it (a stage looks for the questions its agent asked: steps/agent-asks.ts). */
  peek(position: string): Recorded | undefined {
    const rec = this.find(position, topLevelIndex(position));
    return rec && !rec.claimed && (rec.checkpoint !== undefined || rec.started !== undefined) ? rec : undefined;
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
    // The first such checkpoint in journal order.
    let first: [string, Entry] | undefined;
    const consider = (position: string, rec: Entry | undefined) => {
      if (rec?.checkpoint && !rec.claimed && (!first || rec.order < first[1].order)) first = [position, rec];
    };
    this.topLevel.forEach((rec, n) => consider(String(n), rec));
    for (const [position, rec] of this.nested) consider(position, rec);
    if (first) throw this.diverged(first[0], "no step (the workflow returned)", describeStep(first[1].checkpoint!));
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
    const index = topLevelIndex(position);
    const rec = this.find(position, index);
    if (rec === undefined) {
      this.put(position, index, { checkpoint: undefined, started: undefined, attempts: 0, claimed: true, order: this.entries++ });
      return undefined;
    }
    if (rec.claimed) throw new Error(`internal: replay position ${position} claimed twice`);
    rec.claimed = true;
    return rec.checkpoint === undefined && rec.started === undefined ? undefined : rec;
  }

  /** The entry of a recorded position (created at its first event). */
  private entry(position: string): Entry {
    const index = topLevelIndex(position);
    let rec = this.find(position, index);
    if (!rec) {
      rec = { checkpoint: undefined, started: undefined, attempts: 0, claimed: false, order: this.entries++ };
      this.put(position, index, rec);
      // "4.1.0" lies in the groups "4" and "4.1"; a top-level position in none.
      if (index < 0) for (let dot = position.indexOf("."); dot !== -1; dot = position.indexOf(".", dot + 1)) this.groups.add(position.slice(0, dot));
    }
    return rec;
  }

  /** The entry of `position` (whose top-level index is `index`, or -1), wherever `put` left it. */
  private find(position: string, index: number): Entry | undefined {
    if (index >= 0) {
      const rec = this.topLevel[index];
      if (rec !== undefined || this.nested.size === 0) return rec;
    }
    return this.nested.get(position);
  }

  private put(position: string, index: number, rec: Entry): void {
    // Top-level positions come in order, with a gap where a group stood: a far-off
    // index (an edited journal) goes to the map rather than stretching the array.
    if (index >= 0 && index <= this.topLevel.length + MAX_TOP_LEVEL_GAP) this.topLevel[index] = rec;
    else this.nested.set(position, rec);
  }
}

const MAX_TOP_LEVEL_GAP = 64;

const GROUP = "a group of steps (ctx.parallel or ctx.chain)";

/** The number a top-level position is written as (Scope: String(n)), or -1 for any other position. */
function topLevelIndex(position: string): number {
  const length = position.length;
  // At most 9 digits (below 2^31), no leading zero: exactly the strings String(n) writes.
  if (length === 0 || length > 9 || (length > 1 && position.charCodeAt(0) === 48)) return -1;
  let n = 0;
  for (let i = 0; i < length; i++) {
    const digit = position.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) return -1;
    n = n * 10 + digit;
  }
  return n;
}

/**
 * The same stage or tool step with other arguments, at a position where it
 * never completed: fix-and-continue (a failing stage fixed in the file, then
 * `resume --upgrade`). A child run keeps its recorded run id and inputs, so
 * a child step is held to its recorded arguments.
 */
function fixedStep(recorded: StepIdentity, request: StepRequest): boolean {
  return recorded.kind === request.kind && recorded.name === request.name && (request.kind === "stage" || request.kind === "tool");
}

function sameStep(recorded: StepIdentity, request: StepRequest): boolean {
  if (recorded.kind !== request.kind || recorded.name !== request.name) return false;
  return typeof request.args === "string" ? sameArgs(recorded.args, request.args) : digestMatches(recorded.args, request.args);
}

/** What the workflow asks for, written out for a message (its digest in the form of the recorded one it is shown next to). */
function identity(request: StepRequest, recorded?: StepIdentity): StepIdentity {
  return { ...request, args: argsLike(request.args, recorded?.args) };
}
