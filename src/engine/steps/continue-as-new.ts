/**
 * ctx.continueAsNew(inputs): a long-lived workflow ends its run's history
 * and goes on as a new run of the same chain (docs/guides/changing-workflows.md,
 * "Continue as new"; the hand-over itself: ../driver.ts handOver).
 *
 * At the call the inputs are checked against the workflow's input schemas
 * (a bad value fails the run here, `bad_continue_inputs`, nothing
 * recorded), then the call throws a ContinueAsNewSignal that ends the
 * workflow function; RunExecution.execute gives it to the driver, which
 * records the hand-over (`continued_as_new { next, inputs }`, no replay
 * position), starts the next run and ends this one as continued. Only a
 * root run can do it: a child workflow's run belongs to its parent's
 * history (`bad_continue_as_new`).
 */

import { AtomicError, UsageError } from "../../shared/errors.ts";
import { ContinueAsNewSignal } from "../../sdk/workflow.ts";
import { validateInputs } from "../inputs.ts";
import { storedValue } from "../values.ts";
import type { StepRun } from "../step-run.ts";

export function runContinueAsNew(exec: StepRun, inputs: unknown): never {
  if (exec.parentId !== null) {
    throw new AtomicError("bad_continue_as_new", `ctx.continueAsNew ends a root run's history, and run ${exec.runId} is a child workflow run`, "terminal", {
      hint: "return from the child workflow and call ctx.continueAsNew in the root workflow",
    });
  }
  throw new ContinueAsNewSignal(checkedInputs(exec.definition.inputs ?? {}, inputs, exec.definition.name));
}

/** `inputs` as the workflow's schemas accept them (JSON-safe, as a run's inputs are stored); one sentence otherwise. */
export function checkedInputs(schemas: Parameters<typeof validateInputs>[0], inputs: unknown, workflow: string): Record<string, unknown> {
  try {
    const valid = validateInputs(schemas, (inputs ?? {}) as Record<string, unknown>, workflow);
    return storedValue(valid, "ctx.continueAsNew") as Record<string, unknown>;
  } catch (err) {
    if (!(err instanceof UsageError || err instanceof AtomicError)) throw err;
    throw new AtomicError("bad_continue_inputs", `ctx.continueAsNew: ${err.message} (workflow ${workflow})`, "terminal", {
      hint: "pass the inputs the workflow declares, as `atomic run` would take them",
    });
  }
}
