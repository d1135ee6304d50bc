/**
 * What a step sees of the run it belongs to: the one type that the steps in
 * ./steps/ (ctx.task, ctx.parallel, ctx.workflow, ...) take, and that
 * RunExecution implements.
 *
 * Direction of dependencies: run-execution.ts builds each run's `ctx` from
 * the steps and passes itself to them as a StepRun; the steps import this
 * file and never run-execution.ts. So run-execution.ts -> steps/*.ts ->
 * step-run.ts, with no circle (docs/design/layers.md). A child workflow's
 * run is made through `childRun`, so steps/child.ts needs no constructor of
 * RunExecution either.
 */

import type { RunStatus } from "../journal/runs.ts";
import type { RunId } from "../shared/ids.ts";
import type { ErrorInfo } from "../shared/errors.ts";
import type { WorkflowDefinition } from "../sdk/types.ts";
import type { BudgetLedger } from "./budget.ts";
import type { ReplayCursor } from "./replay-cursor.ts";
import type { RunTree } from "./run-tree.ts";
import type { Scope } from "./scope.ts";

/** How a run ended, as RunExecution.execute records it. */
export interface RunOutcome {
  runId: RunId;
  status: RunStatus;
  outputs?: unknown;
  error?: ErrorInfo;
  /** ctx.continueAsNew: the run of the chain that continues this one (this one ended; driver.ts handOver). */
  continuedAs?: RunId;
}

/** One run of a tree, as its steps use it (run-execution.ts has the implementation and says what each member does). */
export interface StepRun {
  readonly tree: RunTree;
  readonly runId: RunId;
  readonly definition: WorkflowDefinition;
  readonly depth: number;
  readonly cursor: ReplayCursor;
  readonly parentId: RunId | null;
  /** What this run spends against: the tree's root ledger, or a child run's own under its parent's (steps/child.ts sets it). */
  budget: BudgetLedger;
  /** Patch ids ctx.patched / ctx.deprecatePatch asked in this drive (steps/patch.ts). */
  readonly patchesAsked: Set<string>;
  /** Their markers' appends, awaited before the run records its end (a failed one fails the run). */
  readonly patchWrites: Promise<unknown>[];
  /** The scope the calling code runs in (a parallel branch, or the run's top level). */
  scope(): Scope;
  /** Wait while the run is paused, then check the step may start (undefined, no await, when unpaused). */
  startGate(scope: Scope, held?: { kind: "stage" | "child"; position: string; name: string }): Promise<void> | undefined;
  /** Refuse to start a step once the tree is stopping, its lease may be gone, the branch was aborted or the time budget is used up. */
  assertMayStart(scope: Scope): void;
  /** What a running step watches: its branch's signal and, with a time budget, the budget's. */
  stepSignal(scope: Scope, agent?: boolean): AbortSignal;
  /** Why a step watching `stepSignal(scope)` was stopped. */
  stepStopError(scope: Scope): Error;
  /** Why a step in `scope` was stopped: the whole tree stopped, or its parallel group failed fast. */
  stopError(scope: Scope): Error;
  /** A child workflow's run in this run's tree, with this run as its parent; `execute()` runs it to its end. */
  childRun(
    runId: RunId,
    definition: WorkflowDefinition,
    inputs: Record<string, unknown>,
    depth: number,
    cursor: ReplayCursor,
    previousStatus: RunStatus | null,
  ): StepRun & { execute(): Promise<RunOutcome> };
}
