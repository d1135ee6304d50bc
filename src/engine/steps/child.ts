/**
 * ctx.workflow: a child workflow, run as a run of its own (own id, own
 * journal sequence) inside the parent's run tree and lease.
 *
 * The boundary in the parent is a step: `step_started` records the child's
 * run id (in the same commit as the child's `run_started`), a checkpoint
 * records its outputs. On resume a finished child returns its outputs; an
 * unfinished one resumes under the recorded id, replaying its own steps.
 * Depth is limited to the config's maxChildDepth (default 3, at most 10) below the root.
 */

import { AtomicError, StepFailedError } from "../../shared/errors.ts";
import { faultPoint } from "../../shared/fault-points.ts";
import { newRunId, type RunId } from "../../shared/ids.ts";
import { isWorkflow } from "../../sdk/workflow.ts";
import type { WorkflowDefinition } from "../../sdk/types.ts";
import { EVENT, type StepIdentity } from "../journal-events.ts";
import { validateInputs } from "../inputs.ts";
import { ReplayCursor } from "../replay-cursor.ts";
import { CONFIG_DEFAULTS } from "../../shared/config/schema.ts";
import { digestArgs } from "../values.ts";
import type { StepRun } from "../step-run.ts";
import { limitsOf, recordedSpending, type Spent } from "../budget.ts";

export async function runChild(
  exec: StepRun,
  child: WorkflowDefinition,
  rawInputs: Record<string, unknown>,
  label: string | undefined,
): Promise<unknown> {
  if (!isWorkflow(child)) {
    throw new StepFailedError("workflow", "ctx.workflow needs a workflow made with workflow({...}) as its first argument", {
      code: "bad_step",
    });
  }
  const name = label ?? child.name;
  const scope = exec.scope();
  const position = scope.nextPosition();
  const step: StepIdentity = { kind: "child", name, args: digestArgs(rawInputs ?? {}) };
  const recorded = exec.cursor.claim(position, step);
  const { tree } = exec;
  if (recorded?.checkpoint) {
    tree.observer({ type: "step_ended", runId: exec.runId, position, kind: "child", name, status: "completed", replayed: true, at: Date.now() });
    return recorded.checkpoint.result;
  }
  await exec.startGate(scope, { kind: "child", position, name });
  const depth = exec.depth + 1;
  const maxDepth = tree.config.maxChildDepth ?? CONFIG_DEFAULTS.maxChildDepth;
  if (depth > maxDepth) {
    throw new StepFailedError(name, `child workflow "${name}" would run at depth ${depth}; the limit is ${maxDepth}`, {
      code: "child_depth",
      hint: "flatten the workflow (call the deeper workflow's steps directly), or raise maxChildDepth in the config (at most 10)",
    });
  }
  let inputs: Record<string, unknown>;
  try {
    inputs = validateInputs(child.inputs ?? {}, rawInputs ?? {}, `the file defining "${child.name}"`);
  } catch (err) {
    if (!(err instanceof AtomicError)) throw err;
    throw new StepFailedError(name, `child workflow "${name}": ${err.message}`, { code: err.code });
  }

  const startedAt = Date.now();
  let childId = recorded?.started?.childRunId as RunId | undefined;
  let cursor: ReplayCursor;
  let spentBefore: Spent | undefined;
  if (childId) {
    const events = await tree.journal.readEvents(childId);
    cursor = new ReplayCursor(childId, events);
    // A child with a budget of its own resumes with what it already spent (the root's ledger counted it already).
    if (limitsOf(child.budget)) spentBefore = await recordedSpending(tree.journal, childId, events);
    await tree.append({
      runId: childId,
      type: EVENT.runResumed,
      payload: { parentId: exec.runId },
      patch: { status: "running", endedAt: null, error: null },
    });
  } else {
    childId = newRunId();
    cursor = new ReplayCursor(childId);
    await Promise.all([
      tree.append({
        runId: exec.runId,
        type: EVENT.stepStarted,
        key: position,
        payload: { ...step, childRunId: childId },
        stage: tree.mail.stageEntry(exec.runId, position, name, "running", 1, "child", childId),
      }),
      tree.append({
        runId: childId,
        type: EVENT.runStarted,
        payload: { workflow: child.name, depth, parentId: exec.runId, parentKey: position },
        newRun: {
          rootId: tree.lease.rootId,
          parentId: exec.runId,
          parentKey: position,
          depth,
          workflowName: child.name,
          workflowPath: "",
          workflowDigest: "",
          inputs,
        },
      }),
    ]);
  }
  tree.observer({ type: "step_started", runId: exec.runId, position, kind: "child", name, attempt: 1, childRunId: childId, at: startedAt });
  tree.mail.setChildPrefix(childId, exec.runId, name);
  const childExec = exec.childRun(childId, child, inputs, depth, cursor, recorded ? "running" : null);
  childExec.budget = exec.budget.child(childId, child.budget, spentBefore);
  const outcome = await childExec.execute();
  // A child that skipped (ctx.exit) ended well: its parent gets its outputs as from a completed one.
  if (outcome.status !== "completed" && outcome.status !== "skipped") {
    tree.observer({ type: "step_ended", runId: exec.runId, position, kind: "child", name, status: "failed", replayed: false, at: Date.now() });
    if (tree.stopReason) throw tree.stoppedError();
    throw new StepFailedError(name, `child workflow "${name}" (${childId}) ${outcome.status}: ${outcome.error?.message ?? "no reason given"}`, {
      code: outcome.error?.code ?? "child_failed",
      hint: `inspect it with: atomic show ${childId}`,
    });
  }
  faultPoint("before-checkpoint");
  await tree.append({
    runId: exec.runId,
    type: EVENT.checkpoint,
    key: position,
    payload: { ...step, result: outcome.outputs, startedAt, childRunId: childId },
    stage: tree.mail.stageEntry(exec.runId, position, name, "finished", 1, "child", childId),
  });
  faultPoint("after-checkpoint");
  // Nothing under the finished child can start any more: its queued messages are undeliverable.
  await tree.mail.childFinished(exec.runId, name);
  tree.observer({ type: "step_ended", runId: exec.runId, position, kind: "child", name, status: "completed", replayed: false, at: Date.now() });
  return outcome.outputs;
}
