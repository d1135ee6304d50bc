/**
 * What a person or an agent operating atomic does to runs, one
 * implementation of each action for every front end that is not the CLI's
 * own foreground drive: `atomic mcp` (cli/mcp/), and the page and the
 * terminal console where they act the same way.
 *
 * Each action is the code its CLI command and the status API already use:
 * listing and showing through the status server's read model
 * (status/source.ts), pause, unpause, cancel, messages and answers through
 * status/control.ts (the journal, then intercom to a live driver), starting
 * through the service's RunStarter (a builtin or registered name, or a path
 * under an allowed directory), and resuming through a detached
 * `atomic resume` (spawn-run.ts): left to the service when one runs with
 * recovery, else driven by that child. Bad input fails with the UsageError
 * the CLI raises for it (its code, sentence and hint).
 */

import { join } from "node:path";
import { BUILTIN_PREFIX, builtinNames } from "../engine/builtins.ts";
import { assertResumable } from "../engine/driver.ts";
import { forkSeed } from "../engine/fork.ts";
import { describeInputs } from "../engine/inputs.ts";
import { loadWorkflowFile } from "../engine/loader.ts";
import { registeredWorkflowFiles, resolveWorkflowName } from "../engine/workflow-names.ts";
import { isDriven } from "../engine/messaging.ts";
import type { Journal } from "../journal/journal.ts";
import { badOriginMessage, isRunOrigin } from "../journal/run-origin.ts";
import { RUN_STATUSES, type RunRecord, type RunStatus } from "../journal/runs.ts";
import { UsageError } from "../shared/errors.ts";
import { newRunId } from "../shared/ids.ts";
import { parseTagPairs } from "../shared/tags.ts";
import { journalControl, type ControlAction, type StatusControl } from "../status/control.ts";
import { StatusSource, type Miss } from "../status/source.ts";
import { artifactStoreFor } from "../artifacts/select.ts";
import { loadConfig } from "../shared/config/load.ts";
import { RunStarter, type StartAnswer, type StartRequest } from "./run-starter.ts";
import { awaitRecorded, awaitResumed, spawnNewRunFrom, spawnResumeDriver } from "./spawn-run.ts";
import { activeService } from "./service-lease.ts";

export interface OperatorOptions {
  journal: Journal;
  home: string;
  /** Where registered workflow names are looked up and started runs run. */
  cwd: string;
  journalUrl?: string | undefined;
  /** Whether the service beside this operator (if any) recovers runs: then new and resumed runs are left to it. Default true. */
  recover?: boolean;
}

export interface NewRunAnswer {
  runId: string;
  /** The run it reruns or forks. */
  from: string;
  drivenBy: "service" | "process";
}

export interface WorkflowEntry {
  name: string;
  source: "builtin" | "registered";
  description: string | null;
  inputs: ReturnType<typeof describeInputs>;
  /** Why a registered file does not load (the others still list). */
  error: string | null;
}

export interface ResumeAnswer {
  runId: string;
  /** "service": the local service drives it now; "process": a detached `atomic resume` does. */
  drivenBy: "service" | "process";
  logPath: string;
}

export class Operator {
  readonly source: StatusSource;
  readonly control: StatusControl;
  private readonly starter: RunStarter;

  constructor(private readonly opts: OperatorOptions) {
    // Stages that ran on worker hosts: their transcripts in the artifact store (artifacts/select.ts), as the page reads them.
    this.source = new StatusSource(opts.journal, { artifacts: artifactStoreFor(opts.journal, loadConfig({ home: opts.home }).config), home: opts.home });
    this.control = journalControl(opts.journal, { home: opts.home });
    this.starter = new RunStarter({ journal: opts.journal, home: opts.home, cwd: opts.cwd, journalUrl: opts.journalUrl, recover: opts.recover ?? true });
  }

  /** A run by full id or unique prefix, or the CLI's error. */
  async run(ref: string): Promise<RunRecord> {
    const found = await this.source.findRun(ref);
    if ("miss" in found) throw missError(found);
    return found;
  }

  async list(q: { status?: string | undefined; origin?: string | undefined; tags?: Record<string, string> | undefined; limit?: number | undefined; offset?: number | undefined }) {
    const tags = parseTagPairs(Object.entries(q.tags ?? {}).map(([k, v]) => `${k}=${v}`), "tag");
    if (q.status !== undefined && !(RUN_STATUSES as readonly string[]).includes(q.status)) {
      throw new UsageError("bad_status", `status must be one of ${RUN_STATUSES.join(", ")}, got ${JSON.stringify(q.status)}`, { hint: "leave it out to list every run" });
    }
    if (q.origin !== undefined && !isRunOrigin(q.origin)) throw new UsageError("bad_origin", badOriginMessage(q.origin), { hint: "leave it out to list every run" });
    return this.source.listRuns({ status: q.status as RunStatus | undefined, origin: q.origin, tags, limit: q.limit ?? 20, offset: q.offset ?? 0 });
  }

  /** A run with its steps (the page's and `atomic show --json`'s report), without the page's graph layout. */
  async show(ref: string) {
    const { run, report, totals } = await this.source.detail(await this.run(ref));
    return { run, totals, report };
  }

  start(req: StartRequest): Promise<StartAnswer> {
    this.opts.journal.assertWritable?.();
    return this.starter.start(req);
  }

  /** `stage`: that stage only (its path from the root run), as atomic pause RUN STAGE. */
  async setControl(ref: string, action: ControlAction, stage?: string) {
    const run = await this.run(ref);
    return this.control.control(run, action, stage);
  }

  async send(ref: string, body: { stage: string; text: string; mode?: string | undefined; sticky?: boolean | undefined }) {
    return this.control.message(await this.run(ref), body);
  }

  async answer(ref: string, body: { question: string; answer: string }) {
    return this.control.answer(await this.run(ref), body);
  }

  /** A stage's output from byte offsets (its transcript for an agent), as GET …/transcript answers. */
  async transcript(ref: string, stage: string, q: { attempt?: number | undefined; stdout?: number | undefined; stderr?: number | undefined }) {
    const t = await this.source.transcript(await this.run(ref), stage, { attempt: q.attempt, stdout: q.stdout ?? 0, stderr: q.stderr ?? 0, turns: true });
    if ("miss" in t) throw missError(t);
    return t;
  }

  /** Continue a stopped run (crashed, interrupted, failed, blocked) as `atomic resume` does, in a detached process. */
  async resume(ref: string): Promise<ResumeAnswer> {
    const run = await this.run(ref);
    assertResumable(run);
    // A home this server may only read: one sentence, before a detached process (and its log) is asked for.
    this.opts.journal.assertWritable?.();
    if (await isDriven(this.opts.journal, run.id)) {
      throw new UsageError("run_live", `run ${run.id} is being driven now; there is nothing to resume`, { hint: "pause or cancel it instead, or wait until it stops" });
    }
    const toService = await this.toService(await this.recordedRecover(run));
    const spawned = spawnResumeDriver({
      runId: run.id,
      cwd: this.opts.cwd,
      home: this.opts.home,
      ...(this.opts.journalUrl ? { journalUrl: this.opts.journalUrl } : {}),
      leaveToService: toService,
    });
    const done = await awaitResumed(this.opts.journal, run.id, run.lastSeq, spawned);
    if ("failed" in done) throw new UsageError("resume_refused", done.failed, { hint: `the resuming process's output is in ${spawned.logPath}` });
    return { runId: run.id, drivenBy: toService ? "service" : "process", logPath: spawned.logPath };
  }

  /** A new run of the run's workflow with its inputs, `changes` over them, as `atomic rerun` (in a detached process). */
  async rerun(ref: string, changes?: Record<string, unknown>): Promise<NewRunAnswer> {
    return this.newRunFrom("rerun", await this.run(ref), { inputs: changes });
  }

  /** A new run that reuses the run's recorded results before step `at` and goes live there, as `atomic fork --at`. */
  async fork(ref: string, at: string): Promise<NewRunAnswer> {
    if (!at.trim()) throw new UsageError("bad_flag", "atomic fork needs --at STEP", { hint: "name the step to go live at, e.g. review or #3 (show_run lists the steps)" });
    const run = await this.run(ref);
    // A step that is not there is refused here, with fork's own sentence, before anything starts.
    if (!run.parentId) forkSeed(run.id, await this.opts.journal.readEvents(run.id), await this.opts.journal.messages.stages(run.id), at.trim());
    return this.newRunFrom("fork", run, { at: at.trim() });
  }

  private async newRunFrom(kind: "rerun" | "fork", run: RunRecord, what: { inputs?: Record<string, unknown> | undefined; at?: string }): Promise<NewRunAnswer> {
    if (run.parentId) throw new UsageError("not_root", `run ${run.id} is a child workflow run`, { hint: `${kind} its root run instead: atomic ${kind} ${run.rootId}` });
    this.opts.journal.assertWritable?.();
    const recover = await this.recordedRecover(run);
    const toService = await this.toService(recover);
    const runId = newRunId();
    const spawned = spawnNewRunFrom({
      kind,
      from: run.id,
      runId,
      ...what,
      cwd: this.opts.cwd,
      home: this.opts.home,
      ...(this.opts.journalUrl ? { journalUrl: this.opts.journalUrl } : {}),
      leaveToService: toService,
    });
    const recorded = await awaitRecorded(this.opts.journal, runId, spawned);
    // The child is the CLI command itself: its refusal (bad inputs, a moved file) is the sentence it printed.
    if ("failed" in recorded) throw new UsageError(`${kind}_refused`, recorded.failed, { hint: `the ${kind}'s output is in ${spawned.logPath}` });
    return { runId, from: run.id, drivenBy: toService ? "service" : "process" };
  }

  /** Whether the run recorded that the service may drive it (`recover: false` opts out). */
  private async recordedRecover(run: RunRecord): Promise<boolean> {
    const first = (await this.opts.journal.readEvents(run.rootId, 0, 1))[0];
    return (first?.payload as { recover?: unknown } | undefined)?.recover !== false;
  }

  private async toService(recover: boolean): Promise<boolean> {
    return (this.opts.recover ?? true) && recover && (await activeService(this.opts.journal)) !== undefined;
  }

  /** The workflows a start may name: the builtins and the registered files of the directory, each with its inputs. */
  async workflows(): Promise<WorkflowEntry[]> {
    const dir = join(this.opts.cwd, ".atomic", "workflows");
    const registered = registeredWorkflowFiles(dir).map((f) => f.slice(0, -3));
    const names = [...new Set([...registered, ...builtinNames()])].sort();
    const out: WorkflowEntry[] = [];
    for (const name of names) {
      const source = registered.includes(name) ? "registered" : "builtin";
      try {
        const path = resolveWorkflowName(name, this.opts.cwd);
        const { definition } = await loadWorkflowFile(path ?? `${BUILTIN_PREFIX}${name}`);
        out.push({ name, source, description: definition.description ?? null, inputs: describeInputs(definition.inputs ?? {}), error: null });
      } catch (err) {
        out.push({ name, source, description: null, inputs: [], error: (err as Error).message });
      }
    }
    return out;
  }

  close(): Promise<void> {
    return this.source.close();
  }
}

function missError(m: Miss): UsageError {
  return new UsageError(m.miss === "ambiguous" ? "ambiguous_run" : m.miss, m.message, { hint: m.hint ?? "list runs with: atomic runs" });
}
