/**
 * Runs started from code: what `POST /api/runs {workflow, inputs, id?}`
 * does in the service (status/app.ts routes it here), and what a schedule's
 * tick does (scheduler.ts).
 *
 * The workflow is a builtin's name, a registered name (a file in
 * `.atomic/workflows/` of the service's directory) or a path, and a path
 * only under a directory the configuration allows (`service.workflowDirs`
 * in `$ATOMIC_HOME/config.json` or the project's `.atomic/config.json`;
 * relative entries are taken from the service's directory). Anyone holding
 * the status token may post, and a path names code the service would run:
 * without that setting no path is accepted at all.
 *
 * The start is keyed (engine/keyed-start.ts): the service loads the
 * workflow, checks the inputs, and with an `id` that names a run already
 * answers with that run (the same workflow and inputs) or refuses
 * (`run_id_conflict`, other ones). Otherwise a detached child records the
 * run (spawn-run.ts: left to the recovery duty, which drives it, or driven
 * by that child when recovery is off); the answer comes once it is recorded, so
 * a `GET /api/runs/:id` right after finds it. Two requests with one id at
 * once share one start here; two services racing with one id still make
 * one run (the journal keys runs by id).
 */

import { realpathSync } from "node:fs";
import { isAbsolute, resolve, sep } from "node:path";
import { requestConflict, runIdConflict } from "../engine/keyed-start.ts";
import { parseInputPairs } from "../engine/inputs.ts";
import { loadWorkflowFile } from "../engine/loader.ts";
import { resolveWorkflowName } from "../engine/workflow-names.ts";
import type { Journal } from "../journal/journal.ts";
import type { RunRecord } from "../journal/runs.ts";
import { UsageError } from "../shared/errors.ts";
import { newRunId, parseRunKey, parseRunRef, type RunId } from "../shared/ids.ts";
import { loadConfig } from "../shared/config/load.ts";
import { awaitRecorded, leaveToService, spawnRunDriver } from "./spawn-run.ts";

export interface StartRequest {
  workflow: string;
  inputs: Record<string, unknown>;
  /** A caller's run id (shared/ids.ts), or a generated one. */
  id?: string;
}

export interface StartAnswer {
  runId: string;
  /** False: a run of that id existed (and asked for the same). */
  created: boolean;
  status: string;
}

export interface RunStarterOptions {
  journal: Journal;
  home: string;
  /** The service's directory: registered names and relative allowed directories are found here, and runs run here. */
  cwd: string;
  journalUrl?: string | undefined;
  /** Whether this service runs the recovery duty: then the runs it starts are left to it (spawn-run.ts). */
  recover: boolean;
  /** Directories a posted path may be under (default: `service.workflowDirs` of the configuration). */
  workflowDirs?: readonly string[];
}

export class RunStarter {
  private readonly pending = new Map<string, Promise<StartAnswer>>();

  constructor(private readonly opts: RunStarterOptions) {}

  /** Starts (or finds) the run a request asks for; UsageError (with a code status/app.ts maps to HTTP) when it cannot. */
  async start(req: StartRequest): Promise<StartAnswer> {
    const runId = req.id === undefined ? newRunId() : requestedId(req.id);
    const same = this.pending.get(runId);
    if (same) return same;
    const started = this.startOnce(runId, req).finally(() => this.pending.delete(runId));
    this.pending.set(runId, started);
    return started;
  }

  private async startOnce(runId: RunId, req: StartRequest): Promise<StartAnswer> {
    const workflow = this.resolveWorkflow(req.workflow);
    const loaded = await loadWorkflowFile(workflow);
    const inputs = parseInputPairs(loaded.definition.inputs ?? {}, [], req.inputs, req.workflow);
    const existing = await this.opts.journal.getRun(runId);
    if (existing) return answer(checked(existing, loaded.definition.name, inputs), false);
    const spawned = spawnRunDriver({
      startedBy: "api",
      workflow: loaded.path,
      inputs,
      runId,
      cwd: this.opts.cwd,
      home: this.opts.home,
      ...(this.opts.journalUrl ? { journalUrl: this.opts.journalUrl } : {}),
      leaveToService: await leaveToService(this.opts.journal, this.opts.recover, loaded.definition),
    });
    const recorded = await awaitRecorded(this.opts.journal, runId, spawned);
    if ("failed" in recorded) {
      throw new UsageError("start_failed", `run ${runId} did not start: ${recorded.failed}`, { hint: `the run's output is in ${spawned.logPath}` });
    }
    // Another start of this id (another service) may have won the race: then it is that run, if it asked for the same.
    return answer(checked(recorded, loaded.definition.name, inputs), true);
  }

  /** A builtin's name, a registered name, or a path under an allowed directory (a UsageError otherwise). */
  resolveWorkflow(text: string): string {
    if (!text.includes("/") && !text.startsWith(".")) {
      const named = resolveWorkflowName(text, this.opts.cwd);
      if (named) return named;
      throw new UsageError("workflow_not_found", `there is no builtin or registered workflow named ${JSON.stringify(text)}`, {
        hint: `register it as ${resolve(this.opts.cwd, ".atomic", "workflows")}/${text}.ts, or name a file under a directory in service.workflowDirs`,
      });
    }
    const dirs = this.allowedDirs();
    const path = resolve(this.opts.cwd, text);
    const real = realOrSelf(path);
    if (!dirs.some((d) => real.startsWith(d.endsWith(sep) ? d : d + sep))) {
      throw new UsageError(
        "workflow_not_allowed",
        dirs.length === 0
          ? `this service starts no workflow by path (${text}): no directory is allowed`
          : `the workflow ${text} is not under a directory this service allows (${dirs.join(", ")})`,
        { hint: 'post a builtin or registered name, or list the directory in "service": {"workflowDirs": [...]} in $ATOMIC_HOME/config.json' },
      );
    }
    return real;
  }

  private allowedDirs(): string[] {
    const dirs = this.opts.workflowDirs ?? workflowDirsOf(this.opts.home, this.opts.cwd);
    return dirs.map((d) => realOrSelf(isAbsolute(d) ? d : resolve(this.opts.cwd, d)));
  }
}

/** `service.workflowDirs` of the configuration (home, then project; checked by its schema). */
export function workflowDirsOf(home: string, cwd: string): string[] {
  return loadConfig({ home, cwd }).config.service?.workflowDirs ?? [];
}

function requestedId(text: string): RunId {
  const id = parseRunRef(text);
  if (id) return id;
  const key = parseRunKey(text);
  throw new UsageError("bad_run_id", "problem" in key ? key.problem : `bad run id ${JSON.stringify(text)}`, { hint: 'for example "id": "nightly-2026-12-01"' });
}

function checked(run: RunRecord, workflowName: string, inputs: Record<string, unknown>): RunRecord {
  const conflict = requestConflict(run, workflowName, inputs);
  if (conflict) throw runIdConflict(run.id, conflict);
  return run;
}

function answer(run: RunRecord, created: boolean): StartAnswer {
  return { runId: run.id, created, status: run.status };
}

/** The path with symbolic links resolved (so a link cannot lead out of an allowed directory), or as given if it does not exist. */
function realOrSelf(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}
