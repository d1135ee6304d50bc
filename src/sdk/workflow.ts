/**
 * `workflow()`: declares a workflow. It only checks the shape of the
 * declaration and brands it, so the engine can tell a workflow from any
 * other default export; nothing runs until `atomic run`.
 */

import { UsageError } from "../shared/errors.ts";
import { resolveSandbox } from "../shared/sandbox-option.ts";
import {
  WORKFLOW_BRAND,
  type ExitStatus,
  type InputSchemas,
  type WorkflowConfig,
  type WorkflowDefinition,
} from "./types.ts";

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/**
 * Declares a workflow: its name, inputs (valibot schemas), optional runner,
 * model and budget, and its `run(ctx)` function. A workflow file
 * default-exports the result. Throws (a usage error, exit code 2) for a
 * name that is not 1-128 letters, digits, `.`, `_` or `-`, or a missing
 * `run`; nothing runs until `atomic run`.
 */
export function workflow<I extends InputSchemas = {}, O = unknown>(
  config: WorkflowConfig<I, O>,
): WorkflowDefinition<I, O> {
  if (!config || typeof config !== "object") {
    throw new UsageError("bad_workflow", "workflow() needs an object with a name and a run function");
  }
  if (typeof config.name !== "string" || !NAME.test(config.name)) {
    throw new UsageError("bad_workflow", `workflow name ${JSON.stringify(config.name)} is not valid`, {
      hint: "use letters, digits, '.', '_' or '-', starting with a letter or digit",
    });
  }
  if (typeof config.run !== "function") {
    throw new UsageError("bad_workflow", `workflow ${config.name} has no run(ctx) function`);
  }
  if (config.sandbox !== undefined) {
    const { problem } = resolveSandbox([{ value: config.sandbox, where: `workflow ${config.name}` }], false);
    if (problem) throw new UsageError("bad_sandbox", problem.message, { hint: problem.hint });
  }
  return Object.freeze({ ...config, [WORKFLOW_BRAND]: true as const });
}

/** True for what `workflow()` returned (the engine's test for a workflow file's default export). */
export function isWorkflow(value: unknown): value is WorkflowDefinition {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[WORKFLOW_BRAND] === true;
}

/**
 * Thrown by `ctx.exit()` to end the run from anywhere in workflow code.
 * Workflow code should not catch it; the engine does.
 */
export class ExitSignal {
  constructor(
    readonly status: ExitStatus,
    readonly reason: string | undefined,
    readonly outputs: unknown,
  ) {}
}

/**
 * Thrown by `ctx.continueAsNew(inputs)`: the run ends its history here and
 * the engine continues the workflow as a new run of the same chain with
 * `inputs`. An ExitSignal, so a parallel group stops and re-raises it as it
 * does `ctx.exit`; workflow code should not catch it.
 */
export class ContinueAsNewSignal extends ExitSignal {
  constructor(readonly inputs: Record<string, unknown>) {
    super("completed", undefined, undefined);
  }
}
