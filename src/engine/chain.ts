/**
 * A chain of runs made by ctx.continueAsNew (./steps/continue-as-new.ts,
 * the hand-over: ./driver.ts handOver): each run but the last ended
 * `completed` with the error code CONTINUED_CODE (shown as `continued`) and
 * names its successor in its last `status_changed` (`continuedAs`); each
 * run but the first names its predecessor in its `run_started`
 * (`continuedFrom`). `atomic resume`, `show` and the driver's hand-over
 * follow the links through here.
 */

import type { Journal } from "../journal/journal.ts";
import type { JournalEvent, RunRecord } from "../journal/runs.ts";
import type { RunId } from "../shared/ids.ts";
import { CONTINUED_CODE, EVENT, type StatusChangedPayload } from "./journal-events.ts";

/** Whether `run` ended by continuing as a new run. */
export function isContinued(run: Pick<RunRecord, "status" | "error">): boolean {
  return run.status === "completed" && run.error?.code === CONTINUED_CODE;
}

/** The run that continues `run`, from its events (its last status change names it). */
export function successorIn(events: readonly JournalEvent[]): RunId | undefined {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!;
    if (e.type === EVENT.statusChanged) return (e.payload as StatusChangedPayload).continuedAs as RunId | undefined;
  }
  return undefined;
}

/** The run that `run` continues, from its events (its `run_started` names it). */
export function predecessorIn(events: readonly JournalEvent[]): RunId | undefined {
  const first = events[0];
  return first?.type === EVENT.runStarted ? ((first.payload as { continuedFrom?: RunId }).continuedFrom ?? undefined) : undefined;
}

/** The run that continues `run`, if it ended continued (its end is among its last events). */
export async function successorOf(journal: Journal, run: RunRecord): Promise<RunId | undefined> {
  if (!isContinued(run)) return undefined;
  const tail = await journal.readEvents(run.id, Math.max(0, run.lastSeq - 32));
  return successorIn(tail) ?? successorIn(await journal.readEvents(run.id));
}

/** The last run of `run`'s chain from `run` on (`run` itself when it did not continue). */
export async function chainEnd(journal: Journal, run: RunRecord): Promise<RunRecord> {
  let current = run;
  for (;;) {
    const next = await successorOf(journal, current);
    const record = next && (await journal.getRun(next));
    if (!record) return current;
    current = record;
  }
}
