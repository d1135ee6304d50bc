/**
 * One run's execution: its replay cursor, its root scope and the `ctx` its
 * workflow function receives. Child workflows get a RunExecution of their
 * own inside the same RunTree (same lease, same writer).
 *
 * Life: `execute()` calls the workflow function inside the run's root
 * scope, then records how the run ended (status_changed) — completed with
 * validated outputs, failed with the error, or interrupted/cancelled when
 * the tree was stopped. A lost lease writes nothing more.
 *
 * Direction of dependencies: each `ctx` method is a step in ./steps/ that
 * receives this execution as a StepRun (step-run.ts: its cursor, scope,
 * budget and tree). This file wires the steps into `ctx`; the steps know
 * only the StepRun type, and steps/child.ts makes the child workflow's run
 * through `childRun`. So run-execution.ts -> steps/ -> step-run.ts, and no
 * step imports this file (docs/design/layers.md).
 */

import * as v from "valibot";
import type { RunStatus } from "../journal/runs.ts";
import type { RunId } from "../shared/ids.ts";
import { AtomicError, CancelledError, LeaseLostError, StepFailedError, errorInfo } from "../shared/errors.ts";
import { ContinueAsNewSignal, ExitSignal } from "../sdk/workflow.ts";
import type { ExitStatus, StepSpec, WorkflowContext, WorkflowDefinition } from "../sdk/types.ts";
import { CONTINUED_CODE, EVENT, type StatusChangedPayload } from "./journal-events.ts";
import type { ReplayCursor } from "./replay-cursor.ts";
import type { RunTree } from "./run-tree.ts";
import { Scope, currentScope, inScope } from "./scope.ts";
import { storedValue } from "./values.ts";
import { runTool } from "./steps/tool.ts";
import { runStage } from "./steps/stage.ts";
import { runSleep } from "./steps/sleep.ts";
import { MAX_TAGS, tagProblem } from "../shared/tags.ts";
import { runChild } from "./steps/child.ts";
import { runGroup } from "./steps/group.ts";
import { runSend } from "./steps/send.ts";
import { runAsk } from "./steps/ask.ts";
import { runMerge } from "./steps/merge.ts";
import { runReview } from "./steps/review.ts";
import { runBestOf } from "./steps/best-of.ts";
import { runPatched } from "./steps/patch.ts";
import { runContinueAsNew } from "./steps/continue-as-new.ts";
import { upgradeDivergence } from "./upgrade.ts";
import { resumeHint, type BudgetLedger } from "./budget.ts";
import type { RunOutcome, StepRun } from "./step-run.ts";

export class RunExecution implements StepRun {
  readonly rootScope: Scope;
  readonly ctx: WorkflowContext;
  /** What this run spends against: the tree's root ledger, or a child run's own under its parent's (child.ts sets it). */
  budget: BudgetLedger;
  /** Patch ids ctx.patched / ctx.deprecatePatch asked in this drive (steps/patch.ts). */
  readonly patchesAsked = new Set<string>();
  /** Their markers' appends, awaited before the run records its end (a failed one fails the run). */
  readonly patchWrites: Promise<unknown>[] = [];

  constructor(
    readonly tree: RunTree,
    readonly runId: RunId,
    readonly definition: WorkflowDefinition,
    readonly inputs: Record<string, unknown>,
    readonly depth: number,
    readonly cursor: ReplayCursor,
    readonly previousStatus: RunStatus | null,
    readonly parentId: RunId | null = null,
  ) {
    this.rootScope = new Scope(this, "", tree.signal);
    this.ctx = this.makeContext();
    this.budget = tree.budget;
  }

  /** The scope the calling code runs in (a parallel branch, or the run's top level). */
  scope(): Scope {
    return currentScope(this, this.rootScope);
  }

  /** A child workflow's run in this tree, under this run (steps/child.ts sets its budget and executes it). */
  childRun(runId: RunId, definition: WorkflowDefinition, inputs: Record<string, unknown>, depth: number, cursor: ReplayCursor, previousStatus: RunStatus | null): RunExecution {
    return new RunExecution(this.tree, runId, definition, inputs, depth, cursor, previousStatus, this.runId);
  }

  async execute(): Promise<RunOutcome> {
    const { tree } = this;
    tree.observer({
      type: "run_started",
      runId: this.runId,
      parentId: this.parentId,
      workflow: this.definition.name,
      resumed: this.previousStatus !== null,
      at: Date.now(),
    });
    let outcome: RunOutcome;
    try {
      const value = await inScope(this.rootScope, () => this.definition.run(this.ctx));
      await Promise.all(this.patchWrites);
      if (tree.stopReason) throw tree.stoppedError();
      this.cursor.assertFullyReplayed();
      outcome = { runId: this.runId, status: "completed", outputs: this.validateOutputs(storedValue(value, "the workflow")) };
    } catch (err) {
      // ctx.continueAsNew: the hand-over (recorded, the next run started) unless the drive is stopping or replay diverged.
      const handOver = err instanceof ContinueAsNewSignal && !tree.stopReason && !this.cursor.divergence && tree.handOver;
      outcome = handOver ? await this.continued(handOver, (err as ContinueAsNewSignal).inputs) : this.blockedByBudget(this.outcomeOf(err instanceof ContinueAsNewSignal && tree.stopReason ? tree.stoppedError() : err));
    }
    this.budget.close();
    // A failure caused by a damaged journal file is not the run's failure: the run stops resumably (crashed) instead.
    tree.checkStorage();
    if (tree.stopReason !== "lease_lost") {
      // Interrupted while the journal takes no writes (Ctrl-C on a full disk): the end raises the fault below.
      await this.recordEnd(outcome).catch((err: unknown) => {
        if (!tree.storageFailed(err) && !tree.storageFault) throw err;
      });
    }
    if (this.runId === tree.lease.rootId) {
      // Messages still queued for a run that can never go on become undeliverable; the poll and broker link stop.
      if (tree.stopReason !== "lease_lost" && !tree.storageFault) await tree.mail.runEnded(outcome.status);
      await tree.mail.close();
      // Whatever was recorded went to a file nobody can read if the journal was deleted or replaced: say that instead.
      const fault = tree.checkStorage();
      if (fault) throw fault;
    }
    const appendLatency = this.runId === tree.lease.rootId ? tree.appendLatency.record() : undefined;
    tree.observer({ type: "run_ended", ...outcome, ...(appendLatency ? { appendLatency } : {}), at: Date.now() });
    return outcome;
  }

  /**
   * A run that failed because its budget (or a child's) ran out is blocked,
   * not failed: `atomic resume --max-cost N` continues it. That covers a
   * failure in a parallel group or a child run while the budget is used up.
   */
  private blockedByBudget(outcome: RunOutcome): RunOutcome {
    if (outcome.status !== "failed" || this.cursor.divergence) return outcome;
    const why = this.budget.exhausted();
    if (outcome.error?.code === "budget_exceeded") {
      // Said when a stage was refused; the stages running then have settled since: the amount spent is the final one, as `show` sums it.
      const own = `run ${this.runId}: `;
      const refused = outcome.error.message.startsWith(own) && outcome.error.message.endsWith("; no new stage starts");
      return { ...outcome, status: "blocked", ...(refused && why ? { error: { ...outcome.error, message: `${own}${why}; no new stage starts` } } : {}) };
    }
    if (!why) return outcome;
    return {
      runId: this.runId,
      status: "blocked",
      error: {
        name: "BudgetExceeded",
        code: "budget_exceeded",
        message: `run ${this.runId}: ${why}`,
        hint: resumeHint(this.tree.lease.rootId, why),
      },
    };
  }

  /** The run ended by continuing as `next`: completed, with the link (an error code `show` and `runs` read as "continued"). */
  private async continued(handOver: NonNullable<RunTree["handOver"]>, inputs: Record<string, unknown>): Promise<RunOutcome> {
    try {
      const next = await handOver(inputs);
      return {
        runId: this.runId,
        status: "completed",
        continuedAs: next,
        error: { name: "ContinuedAsNew", code: CONTINUED_CODE, message: `continued as run ${next}` },
      };
    } catch (err) {
      return this.outcomeOf(err);
    }
  }

  private outcomeOf(err: unknown): RunOutcome {
    const { tree } = this;
    // A divergence from the journal decides how the run ends, whatever the
    // workflow code (a try/catch, a ctx.exit) or a group did with the error.
    if (this.cursor.divergence && !tree.stopReason) {
      const info = errorInfo(this.cursor.divergence);
      const error = tree.upgradedFrom !== undefined ? upgradeDivergence(info, this.cursor.divergence, tree.lease.rootId, tree.upgradedFromCode) : info;
      return { runId: this.runId, status: "failed", error };
    }
    if (err instanceof ExitSignal) {
      let outputs: unknown;
      try {
        outputs = storedValue(err.outputs, "ctx.exit");
      } catch (bad) {
        // Thrown from here it would escape execute() and leave the run "running" forever.
        return { runId: this.runId, status: "failed", error: errorInfo(bad) };
      }
      return {
        runId: this.runId,
        status: err.status,
        outputs,
        ...(err.reason ? { error: { name: "Exit", code: "exit", message: err.reason } } : {}),
      };
    }
    if (tree.stopReason === "interrupted") {
      // Stopped while a question waits: parked, still awaiting its answer (resumable, and resumes waiting).
      const waiting = this.runId === tree.lease.rootId ? tree.mail.hasOpenPrompt() : tree.mail.hasOpenPrompt(this.runId);
      if (waiting) return { runId: this.runId, status: "awaiting_input" };
      return { runId: this.runId, status: "interrupted", error: errorInfo(tree.stoppedError()) };
    }
    if (tree.stopReason === "cancelled") {
      return { runId: this.runId, status: "cancelled", error: errorInfo(tree.stoppedError()) };
    }
    if (err instanceof LeaseLostError) tree.stop("lease_lost");
    // A drive that lost its lease stopped; the run itself goes on (elsewhere, or when resumed).
    if (tree.stopReason === "lease_lost") return { runId: this.runId, status: "interrupted", error: errorInfo(tree.stoppedError()) };
    return { runId: this.runId, status: "failed", error: errorInfo(err) };
  }

  private validateOutputs(value: unknown): unknown {
    const schema = this.definition.outputs;
    if (!schema) return value;
    const parsed = v.safeParse(schema, value);
    if (parsed.success) return storedValue(parsed.output, "the workflow");
    const issue = parsed.issues[0];
    const path = issue.path?.map((p) => String(p.key)).join(".") ?? "";
    throw new StepFailedError("outputs", `the workflow's outputs do not match its schema${path ? ` at "${path}"` : ""}: ${issue.message}`, {
      code: "bad_outputs",
    });
  }

  private async recordEnd(outcome: RunOutcome): Promise<void> {
    const payload: StatusChangedPayload = { from: "running", to: outcome.status };
    if (outcome.error) payload.error = outcome.error;
    if (outcome.continuedAs) payload.continuedAs = outcome.continuedAs;
    const latency = this.runId === this.tree.lease.rootId ? this.tree.appendLatency.record() : undefined;
    if (latency) payload.appendLatency = latency;
    try {
      await this.tree.append({
        runId: this.runId,
        type: EVENT.statusChanged,
        payload,
        patch: {
          status: outcome.status,
          outputs: outcome.outputs ?? null,
          error: outcome.error ?? null,
          endedAt: Date.now(),
          clearControl: true,
          ...(this.cursor.divergence && this.tree.upgradedFrom !== undefined && this.runId === this.tree.lease.rootId ? { workflowDigest: this.tree.upgradedFrom } : {}),
        },
      });
    } catch (err) {
      if (err instanceof LeaseLostError) this.tree.stop("lease_lost");
      else throw err;
    }
  }

  /**
   * Wait while the run is paused, then check the step may start. Returns
   * undefined (no await, no extra tick) in the common unpaused case. A
   * stage or child workflow held here is shown waiting (step_waiting): it
   * reached its start and did not start.
   */
  startGate(scope: Scope, held?: { kind: "stage" | "child"; position: string; name: string }): Promise<void> | undefined {
    if (!this.tree.paused) {
      this.assertMayStart(scope);
      return undefined;
    }
    if (held) this.tree.observer({ type: "step_waiting", runId: this.runId, ...held, reason: "the run is paused", at: Date.now() });
    return this.tree.whilePaused().then(() => this.assertMayStart(scope));
  }

  /** Refuse to start a step (or a stage execution, or a tool call) once the tree is stopping, its lease may be gone, this branch was aborted or this drive's time budget is used up. */
  assertMayStart(scope: Scope): void {
    if (scope.signal.aborted || !this.tree.leaseHeld()) throw this.stopError(scope);
    const late = this.budget.timed ? this.budget.timeUpError() : undefined;
    if (late) throw late;
  }

  /** What a running step watches: its branch's signal and, with a time budget, the budget's (budget.ts). */
  stepSignal(scope: Scope, agent = false): AbortSignal {
    return this.budget.stepSignal(scope.signal, agent);
  }

  /** Why a step watching `stepSignal(scope)` was stopped: its branch (stopError), else the time budget. */
  stepStopError(scope: Scope): Error {
    if (scope.signal.aborted) return this.stopError(scope);
    return this.budget.timeUpError() ?? this.stopError(scope);
  }

  /** Why a step in `scope` was stopped: the whole tree stopped, or its parallel group failed fast. */
  stopError(scope: Scope): Error {
    if (this.tree.stopReason) return this.tree.stoppedError();
    const reason: unknown = scope.signal.reason;
    return reason instanceof Error ? reason : new CancelledError("a sibling step failed", "sibling_failed");
  }

  private makeContext(): WorkflowContext {
    const exec = this;
    const ctx: WorkflowContext = {
      runId: this.runId,
      inputs: this.inputs,
      get replaying() {
        return exec.cursor.replaying;
      },
      log(message: string) {
        exec.tree.observer({ type: "log", runId: exec.runId, message: String(message), at: Date.now() });
      },
      task: (name, opts) => runStage(exec, checkName(name), opts),
      shell: (name, command, opts) => runStage(exec, checkName(name), { ...opts, shell: command }),
      parallel: (steps: StepSpec[], opts) => runGroup(exec, "parallel", steps, opts ?? {}),
      chain: (steps: StepSpec[]) => runGroup(exec, "chain", steps, { concurrency: 1, failFast: true }),
      workflow: (child, inputs, opts) => runChild(exec, child, inputs as Record<string, unknown>, opts?.name) as never,
      tool: ((name: string, args: unknown, fn: never, opts?: never) => runTool(exec, checkName(name), args, fn, opts ?? NO_TOOL_OPTIONS)) as WorkflowContext["tool"],
      sleep: (ms, name) => runSleep(exec, ms, name ?? "sleep"),
      send: (stagePath, text, opts) => runSend(exec, stagePath, text, opts ?? {}),
      ask: (question, opts) => runAsk(exec, question, opts ?? {}),
      merge: (stages, opts) => runMerge(exec, stages, opts),
      review: (stage, opts) => runReview(exec, stage, opts ?? {}),
      bestOf: (n, spec, opts) => runBestOf(exec, n, spec, opts),
      tag: (key, value) => runTag(exec, key, value),
      patched: (id) => runPatched(exec, id, false),
      deprecatePatch(id) {
        runPatched(exec, id, true);
      },
      continueAsNew: (inputs) => runContinueAsNew(exec, inputs),
      exit(opts = {}) {
        const status = opts.status ?? "completed";
        if (!(EXIT_STATUSES as readonly unknown[]).includes(status)) {
          throw new AtomicError("bad_exit_status", `ctx.exit status ${JSON.stringify(status)} is not one of ${EXIT_STATUSES.join(", ")}`, "terminal", {
            hint: 'for example ctx.exit({ status: "skipped", reason: "nothing to do" })',
          });
        }
        throw new ExitSignal(status, opts.reason, opts.outputs);
      },
    };
    return ctx;
  }
}

/** ctx.tag: an upsert on the root run's tags (journal/tags.ts), checked as `--tag` is; not a step. */
async function runTag(exec: RunExecution, key: unknown, value: unknown): Promise<void> {
  const problem = tagProblem(key, value);
  if (problem) throw new AtomicError("bad_tag", `ctx.tag: ${problem}`, "terminal", { hint: 'for example ctx.tag("team", "search")' });
  const k = key as string;
  const rootId = exec.tree.lease.rootId;
  const current = (await exec.tree.journal.tags.of([rootId])).get(rootId) ?? {};
  if (current[k] === value) return;
  if (!Object.hasOwn(current, k) && Object.keys(current).length >= MAX_TAGS) {
    throw new AtomicError("too_many_tags", `ctx.tag: a run has at most ${MAX_TAGS} tags; ${k} would be one more`, "terminal", { hint: "keep the ones you filter on" });
  }
  await exec.tree.journal.tags.set(rootId, { [k]: value as string }, Date.now());
}

/** What ctx.exit accepts, in the order its refusal lists them. */
const EXIT_STATUSES: readonly ExitStatus[] = ["completed", "failed", "cancelled", "skipped", "blocked"];

/** ctx.tool without options: one frozen object, not a new one per call (a replayed step allocates little else). */
const NO_TOOL_OPTIONS: Parameters<typeof runTool>[4] = Object.freeze({});

function checkName(name: unknown): string {
  if (typeof name !== "string" || name.length === 0 || name.length > 200) {
    throw new AtomicError("bad_step_name", `a step name must be a non-empty string of at most 200 characters, got ${JSON.stringify(name)}`, "terminal");
  }
  return name;
}
