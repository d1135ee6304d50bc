/**
 * ctx.parallel and ctx.chain: run a list of steps, each in a scope of its
 * own (positions "<group>.<i>.*"), so replay positions do not depend on how
 * branches interleave.
 *
 * A step is either data (`{ name, shell | prompt, ... }`, run as ctx.task)
 * or a function, called inside its branch scope. Results come back in input
 * order. With `failFast` (default) the first failure stops new branches,
 * cancels running ones (their stages are killed; finished steps keep their
 * checkpoints), waits for them to settle, and rejects with that failure.
 * Without it every step runs and a combined error names each failure.
 * With `group: true` each agent stage given as data is told its siblings'
 * names (its run tools address them: runners/run-tools.ts).
 * The group itself records nothing: its steps do (it still claims its
 * position, so replay notices a group swapped for a single step or back).
 */

import { CancelledError, StepFailedError, ensureError } from "../../shared/errors.ts";
import type { ParallelOptions, StepSpec } from "../../sdk/types.ts";
import { ExitSignal } from "../../sdk/workflow.ts";
import type { StepRun } from "../step-run.ts";
import { inScope } from "../scope.ts";
import { runStage } from "./stage.ts";

export async function runGroup(
  exec: StepRun,
  kind: "parallel" | "chain",
  steps: StepSpec[],
  opts: ParallelOptions,
): Promise<unknown[]> {
  if (!Array.isArray(steps)) {
    throw new StepFailedError(kind, `ctx.${kind} needs an array of steps`, { code: "bad_step" });
  }
  const scope = exec.scope();
  const position = scope.nextPosition();
  exec.cursor.claimGroup(position, kind);
  exec.assertMayStart(scope);
  const failFast = opts.failFast ?? true;
  const limit = opts.concurrency && opts.concurrency > 0 ? Math.floor(opts.concurrency) : steps.length;
  const group = new AbortController();
  const signal = AbortSignal.any([scope.signal, group.signal]);

  // group: the data steps' names, told to each agent of the group (its siblings, to address by name).
  const siblings = opts.group === true ? steps.flatMap((st) => (st && typeof st === "object" && typeof st.name === "string" ? [st.name] : [])) : undefined;
  const results = new Array<unknown>(steps.length);
  const failures: { index: number; error: Error }[] = [];
  let exit: ExitSignal | undefined;
  let next = 0;

  const runOne = async (index: number): Promise<void> => {
    const spec = steps[index];
    const branch = scope.branch(position, index, signal);
    try {
      results[index] = await inScope(branch, async () => {
        exec.assertMayStart(branch);
        if (typeof spec === "function") return await spec();
        if (spec && typeof spec === "object" && typeof spec.name === "string") {
          const { name, ...task } = spec;
          // workspace: the group's, for a stage naming none of its own.
          const own = opts.workspace !== undefined && task.workspace === undefined ? { ...task, workspace: opts.workspace } : task;
          return await runStage(exec, name, own, siblings?.filter((n) => n !== name));
        }
        throw new StepFailedError(kind, `step ${index} of ctx.${kind} is neither a function nor { name, shell | prompt }`, {
          code: "bad_step",
        });
      });
    } catch (err) {
      // ctx.exit() in a branch ends the whole run, not just the branch: stop
      // the group and re-raise the signal itself (never as a failure).
      if (err instanceof ExitSignal) {
        exit ??= err;
        if (!group.signal.aborted) group.abort(new CancelledError("the workflow exited", "exited"));
        return;
      }
      failures.push({ index, error: ensureError(err) });
      // A used-up budget stops new steps but not running ones: live agent stages finish their wrap-up.
      const budget = (err as { code?: unknown } | null)?.code === "budget_exceeded";
      if (failFast && !budget && !group.signal.aborted) group.abort(ensureError(err));
    }
  };

  const lane = async (): Promise<void> => {
    while (next < steps.length) {
      if (exit || (failFast && failures.length > 0)) return;
      if (scope.signal.aborted) return;
      await runOne(next++);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, steps.length) }, lane));

  if (exit) throw exit;
  if (scope.signal.aborted) throw exec.stopError(scope);
  if (failures.length === 0) return results;
  failures.sort((a, b) => a.index - b.index);
  if (failFast || failures.length === 1) {
    // The first failure in time is the cause; siblings it cancelled are noise.
    const cause = group.signal.reason instanceof Error ? group.signal.reason : failures[0]!.error;
    throw cause;
  }
  const summary = failures.map((f) => `#${f.index}: ${f.error.message}`).join("; ");
  throw new StepFailedError(kind, `${failures.length} of ${steps.length} steps of ctx.${kind} failed: ${summary}`, {
    code: "group_failed",
  });
}
