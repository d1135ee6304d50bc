/**
 * Replaying a recorded run against the current workflow code: the check
 * behind `atomic replay` and `testRun(wf, { replay })`. The run's recorded
 * results (its step starts and checkpoints) seed a new run on an
 * in-memory journal, as a fork's reused results do (engine/fork.ts), and
 * the engine drives it: each step the code asks for is compared with what
 * was recorded at its position (engine/replay-cursor.ts). Nothing runs
 * live: where the recorded history ends, the replay stops
 * (ReplayCursor.beyondHistory). The first divergence, if any, is the
 * engine's own nondeterminism error, naming the step, what the code asks
 * for now and what the journal recorded.
 */

import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RootRun } from "../engine/driver.ts";
import { recordedResults, type ForkSeed } from "../engine/fork.ts";
import { EVENT } from "../engine/journal-events.ts";
import { reviveInputs } from "../engine/inputs.ts";
import type { EngineObserver } from "../engine/observer.ts";
import { openMemoryJournal } from "../journal/memory.ts";
import type { JournalEvent } from "../journal/runs.ts";
import type { WorkflowDefinition } from "../sdk/types.ts";
import { StepFailedError } from "../shared/errors.ts";
import { removeTree } from "../shared/remove-tree.ts";
import { InProcessExecutor } from "../runners/stage-executor.ts";
import type { RunExport } from "./run-export.ts";
import { VirtualClock } from "./virtual-clock.ts";

export interface ReplayReport {
  runId: string;
  /** "ok": every recorded step matched the code; "diverged": the first one that did not is `divergence`. */
  result: "ok" | "diverged";
  /** Recorded steps the code asked for, in the order it did. */
  replayed: number;
  divergence?: { position?: string; message: string; hint?: string };
  /** Where the recorded history ended (the next step would have run live), if the code got that far. */
  endedAt?: { position: string; step: string };
  /** The recorded run completed, and the code returned the same outputs (undefined: it did not complete in history). */
  sameOutputs?: boolean;
}

const DIVERGED_HINT = "the change breaks runs recorded before it: keep the old path for them (or let them finish first), or start them anew";

class EndOfHistory extends StepFailedError {}

export async function replayExport(workflow: WorkflowDefinition, exported: RunExport, observer?: EngineObserver): Promise<ReplayReport> {
  const { run, events } = exported;
  const own = events.filter((e) => e.runId === run.id);
  const home = mkdtempSync(join(tmpdir(), "atomic-replay-"));
  const journal = await openMemoryJournal();
  let root: RootRun | undefined;
  let endedAt: ReplayReport["endedAt"];
  let replayed = 0;
  try {
    root = await RootRun.start(
      {
        journal,
        home,
        config: {},
        clock: new VirtualClock(Date.now()),
        executor: new InProcessExecutor(),
        observer: (e) => {
          if (e.type === "step_ended" && e.replayed && e.runId === root?.runId) replayed++;
          observer?.(e);
        },
      },
      {
        // The recorded id (the journal is fresh): a divergence names the run it was found in.
        runId: run.id,
        definition: workflow,
        workflowPath: run.workflowPath,
        digest: run.workflowDigest,
        inputs: reviveInputs(workflow.inputs ?? {}, run.inputs as Record<string, unknown>),
        seed: replaySeed(run.id, own),
        beyondHistory: (position, step) => {
          if (!endedAt) {
            endedAt = { position, step: `${step.kind} "${step.name}"` };
            root?.stop("interrupted");
          }
          throw new EndOfHistory(step.name, "the recorded history ends here", { code: "end_of_history" });
        },
      },
    );
    const outcome = await root.run();
    const report: ReplayReport = { runId: run.id, result: "ok", replayed, ...(endedAt ? { endedAt } : {}) };
    if (outcome.error?.code === "nondeterminism") {
      const position = /at step (\S+):/.exec(outcome.error.message)?.[1];
      return { ...report, result: "diverged", divergence: { ...(position ? { position } : {}), message: outcome.error.message, hint: DIVERGED_HINT } };
    }
    if (!endedAt && outcome.status === "completed" && run.status === "completed") {
      const same = JSON.stringify(outcome.outputs ?? null) === JSON.stringify(run.outputs ?? null);
      if (!same) return { ...report, result: "diverged", sameOutputs: false, divergence: { message: `run ${run.id} replayed every step, but the workflow now returns other outputs than it recorded` } };
      return { ...report, sameOutputs: true };
    }
    return report;
  } finally {
    await journal.close();
    removeTree(home);
  }
}

/** Every recorded result of the run: each checkpointed position's last start record and its checkpoint, in journal order. */
function replaySeed(runId: JournalEvent["runId"], events: readonly JournalEvent[]): ForkSeed {
  const checkpointed = new Set(events.filter((e) => e.type === EVENT.checkpoint && e.key !== null).map((e) => e.key!));
  return { origin: { kind: "fork", runId }, events: recordedResults(events, checkpointed), stages: new Map() };
}
