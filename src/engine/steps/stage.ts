/**
 * ctx.task / ctx.shell: one stage, executed by a runner through the tree's
 * StageExecutor (in this process, or on a worker). A shell stage's command
 * is a string (shell code, `command` in the request) or argv (an array,
 * run without a shell, `argv`); the step's recorded arguments say which.
 *
 * Each attempt is journaled as `step_started` (with its artifact directory)
 * before it runs, so `show` and `logs` find running stages and a resumed run
 * numbers its attempts on. A completed stage is checkpointed with its result
 * (text capped, full output in files). A failed attempt is retried
 * `retries` times; an infrastructure fault (worker_lost, ...) is retried up
 * to 3 attempts on top, counting the failures earlier drives recorded
 * (stage-retries.ts). A stage that still fails is recorded as
 * `step_failed` and, unless `failureMode: "return"`, fails the run without a
 * checkpoint, so `atomic resume` runs it again.
 *
 * Agent stages (stage-setup.ts resolves runner, model and options): before
 * each attempt the run's budget must not be used up (else BudgetExceeded:
 * the run ends blocked) and admission must let it start (sessions per run
 * and per user, host pressure; a wait is recorded as `stage_waiting` so
 * `show` says why). While it runs its usage events count against the
 * budget; a failed attempt's usage is recorded with its step_failed, a
 * completed one's with its checkpoint, so totals are exact sums.
 *
 * The time budget (budget.ts) cancels a running attempt through its signal:
 * a shell stage at the limit, an agent stage a grace after its wrap-up
 * turn; the step then raises BudgetExceededError (the run ends blocked).
 *
 * An agent's ask_user call ends its attempt with `askUser`: the stage parks
 * on the question like ctx.ask and its next attempt continues the
 * conversation with the answer (agent-asks.ts). A CLI agent's call is
 * answered at once, telling it to end its turn; the attempt that ends after
 * it is taken as ending with `askUser` (the session's id kept to resume).
 */

import { DEFAULT_QUEUE } from "../../journal/fleet.ts";
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { StepFailedError } from "../../shared/errors.ts";
import { StageRetries } from "./stage-retries.ts";
import { faultPoint } from "../../shared/fault-points.ts";
import type { StageResult, TaskOptions } from "../../sdk/types.ts";
import type { StageRequest } from "../../runners/types.ts";
import { CANCEL_IF_QUEUED } from "../../runners/stage-executor.ts";
import { ProviderWaits } from "./provider-waits.ts";
import { checkStructured, prepareStage, type StageSetup } from "../stage-setup.ts";
import { stageChannels, stageSandbox } from "../stage-sandbox.ts";
import { openWorkspace, rememberWorkspace, settleWorkspace, workspaceEntry, workspaceOption, type WorkspaceRecord } from "../stage-workspace.ts";
import { shareWorkspace, takePushed, workspaceIdentity } from "../workspace-remote.ts";
import { clearDeadLocks, lockWarnings } from "../worktree-locks.ts";
import type { Scope } from "../scope.ts";
import type { StepRun } from "../step-run.ts";
import { EVENT, type StepIdentity } from "../journal-events.ts";
import { redactValue } from "../../shared/secrets.ts";
import { digestArgs, slug } from "../values.ts";
import { newId } from "../../shared/ids.ts";
import { checkArgv } from "../../sdk/shell.ts";
import { tailLines } from "../../artifacts/stage-logs.ts";
import { getRunner } from "../../runners/registry.ts";
import { AgentAsks } from "./agent-asks.ts";
import { enabledTools } from "../../runners/openai/tools.ts";
import { RUN_TOOLS, STAGE_MCP_TOOLS } from "../../runners/run-tools.ts";
import { attachReads, continuation, fileResult, identityExtras, inheritFromEarlier, outputFile } from "../stage-options.ts";

/** A worker queue's name (TaskOptions.queue). */
const QUEUE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** `siblings`: the names of the stage's group (ctx.parallel with `group: true`), for its run tools. */
export async function runStage(exec: StepRun, name: string, asked: TaskOptions, siblings?: string[]): Promise<StageResult> {
  const scope = exec.scope();
  const position = scope.nextPosition();
  const runner = asked.runner ?? (asked.shell !== undefined ? "shell" : "agent");
  const argv = argvOf(name, asked.shell);
  const step: StepIdentity = {
    kind: "stage",
    name,
    // argv and a command string are different steps: replay tells `["echo", "a b"]` from "echo a b"
    args: digestArgs({
      ...(argv ? { runner, argv, prompt: asked.prompt, model: asked.model } : { runner, shell: asked.shell, prompt: asked.prompt, model: asked.model }),
      ...identityExtras(asked),
    }),
  };
  const recorded = exec.cursor.claim(position, step);
  if (recorded?.checkpoint) {
    const result = recorded.checkpoint.result as StageResult;
    // Its agent's ask_user questions (agent-asks.ts) were recorded beside it: replayed with it.
    new AgentAsks(exec, scope, position, name).replayedWithStage();
    emitEnded(exec, position, name, result, true);
    return result;
  }
  await exec.startGate(scope, { kind: "stage", position, name });
  // What the task asked for, as it asked it, is the step's identity (above); it runs with what it continues.
  const opts = inheritFromEarlier(name, asked);
  // Let the executor warm up (the pool boots its processes) while this stage is being recorded.
  exec.tree.executor.prepare?.();
  const setup = await prepareStage(name, opts, exec.definition, exec.tree.config, (stage) => exec.tree.executor.answers?.({ ...stage, runId: exec.runId }) ?? false);
  if (opts.queue !== undefined && !QUEUE_NAME.test(opts.queue)) {
    throw new StepFailedError(name, `stage "${name}": queue ${JSON.stringify(opts.queue)} is not a queue name`, {
      code: "bad_step",
      hint: "letters, digits, '.', '_' and '-', at most 64, e.g. queue: \"gpu\"",
    });
  }
  // A CLI at a version the tests have not covered: one warning line per run tree, the first time (show keeps it on this stage).
  const versionNote = setup.versionWarning !== undefined && firstWarning(exec, setup.versionWarning) ? setup.versionWarning : undefined;
  if (versionNote) exec.tree.observer({ type: "warning", runId: exec.runId, message: versionNote, at: Date.now() });
  const continueFrom = continuation(name, opts, setup.runner, getRunner(setup.runner));
  let sandbox = stageSandbox(name, opts, exec.definition, exec.tree.config, setup.isAgent, exec.tree.artifactsDir);
  if (opts.reads !== undefined && !setup.isAgent) throw new StepFailedError(name, `stage "${name}": reads attaches files to an agent's prompt; a shell stage has none`, { code: "bad_step" });
  workspaceOption(name, opts.workspace);
  // Its worktree (stage-workspace.ts): opened, or found again by a resumed attempt; the stage runs in it.
  const ws = opts.workspace !== undefined ? await openWorkspace(name, position, exec.runId, opts.workspace, opts.cwd ?? process.cwd()) : undefined;
  if (ws) {
    rememberWorkspace(exec.tree.artifactsDir, exec.runId, ws);
    // A root killed while its git held a lock of this worktree left it: removed when no git is alive to hold it (worktree-locks.ts).
    for (const message of lockWarnings(name, clearDeadLocks(ws))) exec.tree.observer({ type: "warning", runId: exec.runId, message, at: Date.now() });
    // Its commits write to the repository's git directory: writable in a sandbox too.
    if (sandbox) sandbox = { ...sandbox, write: [...sandbox.write, ws.gitDir] };
  }
  // Its repository as another machine would name it: a worker host opens the worktree in its own checkout (fleet/host-workspace.ts).
  const wsIdentity = ws ? await workspaceIdentity(ws) : undefined;
  // Absolute: a relative `cwd` is the run's directory's, and a sandbox (bwrap --chdir, its binds) resolves none.
  const cwd = resolve(ws?.cwd ?? opts.cwd ?? process.cwd());
  const prompt = opts.reads !== undefined && opts.prompt !== undefined ? attachReads(name, opts.prompt, opts.reads, cwd) : opts.prompt;
  const toFile = opts.output === "file";

  const { tree } = exec;
  // Its agent's ask_user questions (agent-asks.ts): one recorded by an earlier driver is where the stage goes on.
  const asks = new AgentAsks(exec, scope, position, name);
  // The openai loop parks on ask_user itself; a CLI agent's call is noted by the driver and parks the stage once its turn ends.
  const cli = setup.runner !== "openai";
  let parked = setup.isAgent ? await asks.recorded() : undefined;
  const served: readonly string[] = cli ? STAGE_MCP_TOOLS : RUN_TOOLS;
  const runTools = setup.isAgent && setup.agent?.tools ? enabledTools(setup.agent.tools.filter((t) => served.includes(t))) : [];
  const retries = Math.max(0, opts.retries ?? 0);
  let attempt = recorded?.attempts ?? 0;
  const retrying = new StageRetries(retries, recorded?.failures);
  let result!: StageResult;
  let lastArtifactDir = "";
  /** When the attempt really started: on the pool, when a worker took it (it waited in the queue until then). */
  const timing: AttemptTiming = { startedAt: 0, waits: new ProviderWaits() };
  for (;;) {
    attempt++;
    const artifactDir = join(tree.artifactsDir, exec.runId, `${position}-${slug(name)}`, `attempt-${attempt}`);
    timing.startedAt = Date.now();
    timing.waits = new ProviderWaits();
    lastArtifactDir = artifactDir;
    const request: StageRequest = {
      runId: exec.runId,
      stageKey: position,
      stageName: name,
      attempt,
      runner: setup.runner,
      ...(argv ? { argv } : typeof opts.shell === "string" ? { command: opts.shell } : {}),
      ...(prompt !== undefined ? { prompt } : {}),
      ...(setup.model !== undefined ? { model: setup.model } : {}),
      ...(setup.agent ? { agent: toFile ? { ...setup.agent, output: outputFile(artifactDir) } : setup.agent } : {}),
      ...(parked ? { continueFrom: parked.continueFrom, answer: parked.answer } : continueFrom ? { continueFrom } : {}),
      ...(setup.isAgent && tree.journal.artifactStore ? { sessionsTravel: true } : {}),
      ...(sandbox ? { sandbox } : {}),
      cwd,
      ...(ws ? { cwdOption: ws.cwd } : opts.cwd !== undefined ? { cwdOption: opts.cwd } : {}),
      ...(wsIdentity ? { workspace: wsIdentity } : {}),
      ...(opts.queue !== undefined && opts.queue !== DEFAULT_QUEUE ? { queue: opts.queue } : {}),
      ...(tree.executor.protocol !== undefined ? { protocol: tree.executor.protocol } : {}),
      ...(opts.env ? { env: opts.env } : {}),
      ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}),
      artifactDir,
      workId: newId("work"),
      // Its result may use the budget up: the pool claims nothing more until the root counted it (pool/dispatcher.ts).
      ...(tree.executor.budgetCounted && exec.budget.spendingLimited ? { budgeted: true } : {}),
    };
    // Paused (atomic pause RUN STAGE): the attempt does not start until the stage is unpaused.
    await whileStagePaused(exec, scope, position, name);
    // On the pool, the work item is enqueued in the same commit as the attempt's start record.
    exec.assertMayStart(scope);
    exec.budget.assertMayStart();
    const signal = exec.stepSignal(scope, setup.isAgent);
    const ticket = await admit(exec, signal, position, name, setup.isAgent).catch((err: unknown) => {
      throw signal.aborted ? exec.stepStopError(scope) : err;
    });
    // A worker host may take this attempt: it goes on from what earlier ones left here (workspace-remote.ts).
    if (ws && wsIdentity && tree.executor.queued && tree.journal.fleet) {
      const unshared = await shareWorkspace(ws, wsIdentity, name);
      if (unshared) tree.observer({ type: "warning", runId: exec.runId, message: `stage ${name}: its worktree's work is not on ${wsIdentity.remote.url}, so a worker host that takes attempt ${attempt} starts without it: ${unshared}`, at: Date.now() });
    }
    const liveId = `${exec.runId}:${position}:${attempt}`;
    // Run tools (message, ask_agent, reply): this attempt's credential, refused once it ends (mail/stage-tools.ts).
    let asked: { question: string; choices?: string[] } | undefined;
    const noteAsk = (question: string, choices: string[] | undefined) => {
      if (asked) return `your question "${asked.question.slice(0, 80)}" already waits for a person; end your turn now, its answer comes as the next message`;
      asked = { question, ...(choices ? { choices } : {}) };
      return undefined;
    };
    const ask = cli && runTools.includes("ask_user") ? { asked: noteAsk } : {};
    const token = runTools.length ? tree.mail.mintStageToken({ runId: exec.runId, stageKey: position, path: tree.mail.pathOf(exec.runId, name), name, attempt, tools: runTools, ...ask }) : undefined;
    if (token) request.runTools = { rootId: tree.lease.rootId, token, home: tree.mail.home, ...(siblings?.length ? { siblings } : {}) };
    // A sandboxed stage reaches its run through the broker's socket, made visible inside (stage-sandbox.ts).
    if (token && request.sandbox) request.sandbox = { ...request.sandbox, channels: await stageChannels(tree.mail.home) };
    // Traces on: the attempt's span starts now (attempt_ended ends it), and its processes get its context (TRACEPARENT).
    if (tree.tracer) request.traceparent = tree.tracer.stageAttempt(request, exec.definition.name);
    try {
      // Known secrets never reach the workflow or the journal in a stage's text or error (shared/secrets.ts).
      result = redactValue(await runAttempt(exec, scope, signal, step, setup, request, liveId, timing, ws ? { workspace: workspaceEntry(ws) } : {}));
      // What a continuing stage inherits (stage-options.ts inheritFromEarlier).
      if (setup.isAgent) result = { ...result, runner: setup.runner, ...(setup.model !== undefined ? { model: setup.model } : {}), ...(ws ? { cwd: ws.cwd } : opts.cwd !== undefined ? { cwd: opts.cwd } : {}) };
      if (versionNote) result = { ...result, warnings: [...(result.warnings ?? []), versionNote] };
    } catch (err) {
      exec.budget.settle(liveId, undefined);
      tree.observer({ type: "attempt_ended", runId: exec.runId, position, name, attempt, status: "cancelled", error: { code: "stopped", message: err instanceof Error ? err.message : String(err) }, at: Date.now() });
      budgetCounted(exec, request);
      throw err;
    } finally {
      ticket.release();
      if (token) tree.mail.revokeStageToken(token);
    }
    // A CLI agent asked the person during this attempt (mail/stage-tools.ts): the turn it ended is where the stage parks.
    // In a stage with a schema, that turn's last words ("waiting for the person") are no answer: a CLI without native
    // structured output (pi, opencode) fails them as not JSON, and the stage parks all the same.
    const endedOnQuestion = result.status === "completed" || (!!asked && result.error?.code === "structured_output_invalid");
    if (asked && endedOnQuestion && !result.askUser) {
      const { error: _notAnAnswer, ...ended } = result;
      result = { ...ended, status: "completed", askUser: { callId: "", ...asked } };
    }
    if (result.askUser && !signal.aborted) {
      // The agent asked the person: its usage so far is recorded, the stage parks on the question, then goes on.
      exec.budget.settle(liveId, result.usage);
      tree.observer({ type: "attempt_ended", runId: exec.runId, position, name, attempt, status: "completed", ...(result.usage ? { usage: result.usage } : {}), at: Date.now() });
      budgetCounted(exec, request);
      if (result.usage && (result.usage.turns > 0 || result.usage.costMicroUsd > 0)) {
        await tree.append({
          runId: exec.runId,
          type: EVENT.usageRecorded,
          payload: { stageKey: position, name, attempt, usage: result.usage, ...timing.waits.field() },
          stage: { ...tree.mail.stageEntry(exec.runId, position, name, "running", attempt), usage: result.usage },
        });
      }
      // Its turn ran on a worker host: what it pushed comes into this worktree now (the next turn may run here).
      if (ws && result.pushed) await takeHostCommits(name, ws, result.pushed);
      parked = await asks.park(result, artifactDir);
      continue;
    }
    result = checkStructured(setup, opts.schema !== undefined, result);
    if (toFile) result = fileResult(result, setup.isAgent ? request.agent?.output : result.outputPath);
    exec.budget.settle(liveId, result.usage);
    tree.observer({
      type: "attempt_ended",
      runId: exec.runId,
      position,
      name,
      attempt,
      status: signal.aborted && result.status !== "completed" ? "cancelled" : result.status,
      ...(result.error ? { error: { code: result.error.code, message: result.error.message } } : {}),
      ...(result.usage ? { usage: result.usage } : {}),
      at: Date.now(),
    });
    budgetCounted(exec, request);
    if (result.status === "completed") break;
    // A journal file truncated, deleted or replaced under the stage fails it with I/O errors before the periodic
    // check sees the file: look now, so the stage is stopped (the run stays resumable), not retried nor failed.
    tree.checkStorage();
    if (result.status === "cancelled" || signal.aborted) {
      // Failed because the run was stopping (its journal file damaged, say): shown as stopped, as it is recorded.
      emitEnded(exec, position, name, result.status === "cancelled" ? result : { ...result, status: "cancelled" }, false);
      // What a cancelled agent spent still counts (totals are the sum of every attempt's usage).
      if (result.usage && (result.usage.turns > 0 || result.usage.costMicroUsd > 0) && tree.stopReason !== "lease_lost") {
        await tree
          .append({
            runId: exec.runId,
            type: EVENT.usageRecorded,
            payload: { stageKey: position, name, attempt, usage: result.usage, ...timing.waits.field() },
            stage: { ...tree.mail.stageEntry(exec.runId, position, name, "running", attempt), usage: result.usage },
          })
          .catch(() => {});
      }
      // Stopped on a worker host, which pushed what the stage did (fleet/host.ts finish): kept in this worktree too.
      if (ws && result.pushed) {
        await takePushed(ws, result.pushed).catch((err: unknown) =>
          tree.observer({ type: "warning", runId: exec.runId, message: `stage ${name}: what it did before it was stopped is on ${result.pushed!.url} (branch ${result.pushed!.branch}), not in its worktree ${ws.path}: ${err instanceof Error ? err.message : String(err)}`, at: Date.now() }),
        );
      }
      // Stopped by the run (Ctrl-C, cancel), its parallel group, or the time budget (blocked: resumable).
      throw exec.stepStopError(scope);
    }
    await tree.append({
      runId: exec.runId,
      type: EVENT.stepFailed,
      key: position,
      // startedAt: when a worker started it (a short attempt's stage_running is never written).
      payload: { ...step, attempt, startedAt: timing.startedAt, error: { name: "StageFailed", ...result.error }, ...(result.usage ? { usage: result.usage } : {}), ...timing.waits.field() },
      // Its work item, should no worker have settled it (the pool was lost): no later pool may run it.
      ...(tree.executor.queued && request.workId ? { abandonWork: request.workId } : {}),
      // The stage index keeps the stage's usage too: the run list sums it without reading events.
      stage: { ...tree.mail.stageEntry(exec.runId, position, name, "failed", attempt), ...(result.usage ? { usage: result.usage } : {}) },
    });
    // The failed attempt ran on a worker host: its pushed commits come into this worktree now, so a retry on the
    // root's own workers goes on from them (one on another host fetches them from the remote: fleet/host-workspace.ts).
    if (ws && result.pushed) await takeHostCommits(name, ws, result.pushed);
    // Its retries (stage-retries.ts) count the failures earlier drives recorded too.
    if (retrying.again(result.error?.code ?? "failed")) continue;
    break;
  }

  if (result.status !== "completed" && opts.failureMode !== "return") {
    // What the stage said last on stderr is usually why it failed: the failure lines quote it.
    const stderr = tailLines(result.errorPath);
    emitEnded(exec, position, name, result, false, stderr);
    throw new StepFailedError(name, `stage "${name}" failed: ${result.error?.message ?? "unknown error"}`, {
      code: result.error?.code ?? "stage_failed",
      // An infrastructure fault's log (the pool coordinator's) is where to look, named here once.
      hint: result.error?.log ? `the pool's log: ${result.error.log}` : `see its output with: atomic logs ${exec.runId} --stage ${name}`,
      stderr,
    });
  }
  if (ws) {
    // Run on a worker host, in its own checkout: its branch, pushed to the shared remote, comes into this worktree first.
    const { pushed, ...rest } = result;
    result = { ...rest, workspace: await settled(name, ws, lastArtifactDir, pushed) };
  } else if (result.pushed) {
    const { pushed: _none, ...rest } = result;
    result = rest;
  }
  if (setup.isAgent && result.status === "completed" && result.structured === undefined && result.text.trim() === "") {
    // An agent that answered nothing: flagged (show, the page, the run's output), not failed; the workflow decides.
    const warning = `the stage's output is empty (${result.outputPath})`;
    result = { ...result, warnings: [...(result.warnings ?? []), warning] };
    tree.observer({ type: "warning", runId: exec.runId, message: `stage ${name}: ${warning}`, at: Date.now() });
  }
  faultPoint("before-checkpoint");
  await tree.append({
    runId: exec.runId,
    type: EVENT.checkpoint,
    key: position,
    payload: { ...step, result, startedAt: timing.startedAt, ...timing.waits.field() },
    stage: {
      ...tree.mail.stageEntry(exec.runId, position, name, "finished", attempt),
      outcome: result.status === "completed" ? "completed" : "failed",
      ...(result.usage ? { usage: result.usage } : {}),
    },
  });
  faultPoint("after-checkpoint");
  emitEnded(exec, position, name, result, false);
  return result;
}

/** A worker host's attempt pushed the stage's branch: its commits fetched into this worktree (a git failure fails the step). */
async function takeHostCommits(name: string, ws: WorkspaceRecord, pushed: NonNullable<StageResult["pushed"]>): Promise<void> {
  try {
    await takePushed(ws, pushed);
  } catch (err) {
    throw new StepFailedError(name, `stage "${name}": its worktree ${ws.path} could not take the commits a worker host pushed: ${err instanceof Error ? err.message : String(err)}`, {
      code: "workspace_failed",
      hint: `look at it with: git -C ${ws.path} status`,
    });
  }
}

/** The stage's worktree after its last attempt: its leftovers committed, its commits and diff (a git failure fails the step). */
async function settled(name: string, ws: WorkspaceRecord, artifactDir: string, pushed: StageResult["pushed"]): Promise<StageResult["workspace"]> {
  if (pushed) await takeHostCommits(name, ws, pushed);
  try {
    mkdirSync(artifactDir, { recursive: true });
    return await settleWorkspace(ws, name, join(artifactDir, "workspace.diff"));
  } catch (err) {
    throw new StepFailedError(name, `stage "${name}": its worktree ${ws.path} could not be settled: ${err instanceof Error ? err.message : String(err)}`, {
      code: "workspace_failed",
      hint: `look at it with: git -C ${ws.path} status`,
    });
  }
}

/** The argv form's array (checked: refused before anything is recorded), or undefined for a command string. */
/** Warnings given once per run tree (a CLI's untested version). */
const warnedOnce = new WeakMap<object, Set<string>>();
function firstWarning(exec: StepRun, warning: string): boolean {
  const seen = warnedOnce.get(exec.tree) ?? new Set<string>();
  warnedOnce.set(exec.tree, seen);
  if (seen.has(warning)) return false;
  seen.add(warning);
  return true;
}

function argvOf(name: string, shell: TaskOptions["shell"]): string[] | undefined {
  if (!Array.isArray(shell)) return undefined;
  const problem = checkArgv(shell);
  if (problem) {
    throw new StepFailedError(name, `stage "${name}": ${problem}`, {
      code: "bad_step",
      hint: 'write ctx.shell(name, ["program", "arg", …]), or a command string',
    });
  }
  return [...(shell as string[])];
}

/** A budgeted attempt's usage is in the ledger: the pool may claim again, unless the run's budget is used up (pool/dispatcher.ts). */
function budgetCounted(exec: StepRun, request: StageRequest): void {
  if (request.budgeted) exec.tree.executor.budgetCounted?.(request.workId, exec.tree.budget.exhausted() !== undefined);
}

/** One attempt, once admitted: its start record, then its execution. */
async function runAttempt(
  exec: StepRun,
  scope: Scope,
  /** The branch's signal and the time budget's (agents: after their grace). */
  signal: AbortSignal,
  step: StepIdentity,
  setup: StageSetup,
  request: StageRequest,
  liveId: string,
  timing: AttemptTiming,
  /** More for the start record (the stage's worktree). */
  recordExtra: Record<string, unknown>,
): Promise<StageResult> {
  const { tree } = exec;
  const { stageKey: position, stageName: name, attempt, artifactDir } = request;
  // On the pool the attempt waits for a free worker: queued until the worker says it started it.
  const queued = tree.executor.queued;
  const hostQueue = queued ? tree.executor.hostQueue?.(request) : undefined;
  let began = false;
  let record: ReturnType<typeof setTimeout> | undefined;
  // The admission wait may have been long: check again.
  exec.assertMayStart(scope);
  exec.budget.assertMayStart();
  // Messages sent before this attempt: delivered before its first turn (part of the request, so workers get them too).
  const inbox = await tree.mail.claim(exec.runId, position, name, attempt);
  if (inbox.mail.length > 0) request.initialMessages = inbox.mail.map((m) => ({ id: m.messageId, text: m.text }));
  await tree.append({
    runId: exec.runId,
    type: EVENT.stepStarted,
    key: position,
    // requestedAt: when the workflow started the attempt (before admission let it go): queued since then.
    payload: { ...step, ...recordExtra, attempt, artifactDir, workId: request.workId, runner: request.runner, ...(queued ? { queued, requestedAt: timing.startedAt } : {}), ...(hostQueue ? { hostQueue } : {}) },
    // Progress, not a result: losing it to a power cut only re-runs an unfinished stage. (Its work item is another
    // matter on Postgres, whose server can lose it while this process lives on: ../../journal/postgres/append.ts.)
    durable: false,
    ...(tree.executor.queued ? { work: { id: request.workId!, stageKey: position, attempt, descriptor: request } } : {}),
    // The stage index says queued until the worker starts it (stage_running, or the attempt's end record).
    stage: tree.mail.stageEntry(exec.runId, position, name, queued ? "queued" : "running", attempt),
  });
  faultPoint("stage-start-recorded");
  tree.observer({ type: "step_started", runId: exec.runId, position, kind: "stage", name, attempt, ...(queued ? { queued } : {}), ...(hostQueue ? { hostQueue } : {}), at: timing.startedAt });
  await tree.mail.running(exec.runId, position, name, attempt, inbox.claimed);
  const path = tree.mail.pathOf(exec.runId, name);
  if (setup.isAgent) tree.agentStarted(liveId, exec.runId, position, path, exec.budget);
  try {
    // The records above may have taken a while (or the process was stopped meanwhile): the lease must still hold.
    exec.assertMayStart(scope);
    tree.stagesExecuted = true;
    // Still queued when the budget runs out: taken off the queue, never started (one a worker runs goes on, even if
    // its start has not reached this process yet: CANCEL_IF_QUEUED).
    const budgetStop = new AbortController();
    const stopListening = request.budgeted ? exec.budget.whenExhausted(() => began || budgetStop.abort(CANCEL_IF_QUEUED)) : () => {};
    // Queued stages publish their live events where they run (the pool's workers); in-process ones here.
    const publish = tree.executor.queued ? undefined : tree.mail.livePublisher(exec.runId, position, attempt, request.artifactDir);
    const result = await tree.executor.execute(request, request.budgeted ? AbortSignal.any([signal, budgetStop.signal]) : signal, (event) => {
      publish?.(event);
      if (event.type === "started") {
        if (queued && !began) record = running(exec, request, event.at ?? Date.now(), timing);
        began = true;
        // Paused while it was on its way to its runner: told now that it runs.
        if (setup.isAgent && tree.stagePaused(path)) tree.holdStage(request, true);
      } else if (event.type === "held") {
        heldAfterTurn(exec, position, name, path, event.held);
      } else if (event.type === "message_received") {
        tree.mail.received(exec.runId, position, attempt, event.id);
      } else if (event.type === "output") {
        tree.observer({ type: "stage_output", runId: exec.runId, position, name, stream: event.stream, text: event.text });
      } else if (event.type === "usage") {
        exec.budget.addLive(liveId, event.usage);
        if (event.call) timing.waits.add(event.call);
        tree.observer({ type: "stage_usage", runId: exec.runId, position, name, usage: event.usage, ...(event.call ? { call: event.call } : {}), at: Date.now() });
      } else if (event.type === "tool_start" || event.type === "tool_end") {
        const state = event.type === "tool_start" ? "started" : "ended";
        tree.observer({ type: "stage_tool", runId: exec.runId, position, name, tool: event.name, ...(event.id ? { callId: event.id } : {}), state, ...(event.type === "tool_end" ? { ok: event.ok } : {}), at: event.at ?? Date.now() });
      }
    });
    stopListening();
    if (budgetStop.signal.aborted && result.status === "cancelled" && !signal.aborted) {
      emitEnded(exec, position, name, { ...result, status: "cancelled" }, false);
      exec.budget.assertMayStart(); // throws: the budget is used up
    }
    return result;
  } finally {
    // Ended before its start was recorded: its checkpoint or failure record says when it started.
    if (record) clearTimeout(record);
    tree.mail.ended(exec.runId, position, attempt, request.runner);
    tree.agentEnded(liveId);
  }
}

/**
 * How long a started attempt runs before its start (stage_running) is
 * recorded: a short stage's checkpoint or failure record carries its real
 * start, so only stages still running then need the record (for readers in
 * other processes: show, the page). A fan-out of short stages writes one
 * record less per stage (bench/pool.ts).
 */
const RUNNING_RECORD_AFTER_MS = 100;

/** When the attempt really started (on the pool, when a worker took it), and what it waited for at its provider. */
interface AttemptTiming {
  startedAt: number;
  waits: ProviderWaits;
}

/** A queued attempt started on its worker: shown live, its timing starts now, recorded (progress only) if it is still running a moment later. */
function running(exec: StepRun, request: StageRequest, at: number, timing: { startedAt: number }): ReturnType<typeof setTimeout> {
  const { stageKey: position, stageName: name, attempt } = request;
  timing.startedAt = at;
  exec.tree.observer({ type: "step_running", runId: exec.runId, position, name, attempt, at });
  return setTimeout(() => {
    void exec.tree
      .append({
        runId: exec.runId,
        type: EVENT.stageRunning,
        payload: { stageKey: position, attempt, at },
        durable: false,
        stage: exec.tree.mail.stageEntry(exec.runId, position, name, "running", attempt),
      })
      .catch(() => {}); // visibility only: a lost record leaves the attempt shown queued until it ends
  }, RUNNING_RECORD_AFTER_MS);
}

/** Paused (`atomic pause RUN STAGE`): the attempt waits to start until unpaused; the wait is recorded and shown. */
async function whileStagePaused(exec: StepRun, scope: Scope, position: string, name: string): Promise<void> {
  const { tree } = exec;
  const path = tree.mail.pathOf(exec.runId, name);
  if (!tree.stagePaused(path)) return;
  recordWaiting(exec, position, name, `the stage is paused: atomic unpause ${tree.lease.rootId} ${path}`);
  await tree.whileStagePaused(path);
  exec.assertMayStart(scope);
}

/** A running agent stage holds after its turn (paused), or goes on: recorded as a wait (progress) and shown. */
function heldAfterTurn(exec: StepRun, position: string, name: string, path: string, held: boolean): void {
  if (held) {
    recordWaiting(exec, position, name, `paused after its turn: atomic unpause ${exec.tree.lease.rootId} ${path}`);
    return;
  }
  void exec.tree.append({ runId: exec.runId, type: EVENT.stageWaiting, payload: { stageKey: position, name, reason: "", over: true }, durable: false }).catch(() => {});
}

function recordWaiting(exec: StepRun, position: string, name: string, reason: string): void {
  exec.tree.observer({ type: "step_waiting", runId: exec.runId, position, kind: "stage", name, reason, at: Date.now() });
  // visibility only: a lost record changes nothing
  void exec.tree.append({ runId: exec.runId, type: EVENT.stageWaiting, payload: { stageKey: position, name, reason }, durable: false }).catch(() => {});
}

/** Waits for admission; a wait is recorded (progress, not a result) and shown live. */
async function admit(exec: StepRun, signal: AbortSignal, position: string, name: string, agent: boolean) {
  const { tree } = exec;
  return tree.admission.admit(agent, signal, (reason) => {
    const at = Date.now();
    tree.observer({ type: "step_waiting", runId: exec.runId, position, name, reason, at });
    void tree
      .append({ runId: exec.runId, type: EVENT.stageWaiting, payload: { stageKey: position, name, reason }, durable: false })
      .catch(() => {}); // visibility only: a lost record changes nothing
  });
}

function emitEnded(exec: StepRun, position: string, name: string, result: StageResult, replayed: boolean, stderr: string[] = []) {
  exec.tree.observer({
    type: "step_ended",
    runId: exec.runId,
    position,
    kind: "stage",
    name,
    status: result.status,
    replayed,
    result: { exitCode: result.exitCode, outputPath: result.outputPath, ...(result.usage ? { usage: result.usage } : {}) },
    ...(result.error ? { error: { name: "StageFailed", ...result.error, ...(stderr.length ? { stderr } : {}) } } : {}),
    at: Date.now(),
  });
}
