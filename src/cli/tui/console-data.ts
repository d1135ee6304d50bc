/**
 * What `atomic tui` reads and does, without any drawing: the run list
 * (status/summaries.ts through StatusSource, filtered by status and
 * workflow), a run's detail (its report, totals and open questions), a
 * stage's attach feed (cli/attach-feed.ts: its conversation, live, and
 * what is typed to it), and the actions, each through the code the CLI and
 * the status page use: pause, unpause and cancel (status/control.ts),
 * answers (engine/messaging.ts, recorded as by "tui"), resume and rerun (this binary's own `atomic
 * resume` / `atomic rerun`, started in the background so the run outlives
 * the console; `--detach` to the service when one runs).
 */

import { closeSync, mkdirSync, openSync } from "node:fs";
import { join } from "node:path";
import type { Journal } from "../../journal/journal.ts";
import type { RunRecord, RunStatus } from "../../journal/runs.ts";
import type { RunReport, StepReport } from "../../engine/run-report.ts";
import { StatusSource } from "../../status/source.ts";
import type { RunListPage, RunSummary } from "../../status/summaries.ts";
import { buildRunReport } from "../../engine/run-report.ts";
import { reportTotals, type RunTotals } from "../../status/totals.ts";
import { journalControl, type ControlAction } from "../../status/control.ts";
import { activeService } from "../../service/service-lease.ts";
import { selfCommand } from "../../shared/self-exec.ts";
import { UsageError } from "../../shared/errors.ts";
import { AttachFeed } from "../attach-feed.ts";

/** One row of a run's stage tree: a step, or a child run's step under its boundary, with its depth. */
export interface StageRow {
  /** The run the step belongs to (a child run's id for its steps). */
  runId: string;
  position: string;
  depth: number;
  step: StepReport;
}

export interface OpenQuestion {
  runId: string;
  id: string;
  question: string;
  choices: string[] | null;
}

/** A run as the console shows it: its line (with the report's counts), its report and totals. */
export interface RunDetail {
  run: RunSummary;
  report: RunReport;
  totals: RunTotals;
}

/** Names a row's stage (its run, position and kind): the conversation of a stage is shown only under its row. */
export function rowKey(row: StageRow): string {
  return `${row.runId}\u0000${row.position}\u0000${row.step.kind}`;
}

/** The run list's filter (undefined: any). */
export interface RunFilter {
  status?: RunStatus | undefined;
  workflow?: string | undefined;
}

/** Names a filter: the run list read with one is shown only while it is the filter, never under another's title. */
export function filterKey(filter: RunFilter): string {
  return `${filter.status ?? ""}\u0000${filter.workflow ?? ""}`;
}

/** A page of the run list and the filterKey of the filter it was read with. */
export interface RunList extends RunListPage {
  of: string;
}

export interface Conversation {
  /** The rowKey of the stage it is of: a pane shows it only while that stage is selected, never under another's header. */
  of: string;
  text: string;
  live: boolean;
  /** Why there is none (not a stage, no output yet). */
  none?: string;
}

/** The rows of a report's tree: steps in order, a child run's steps indented under the step that started it. */
export function stageRows(report: RunReport, depth = 0, into: StageRow[] = []): StageRow[] {
  for (const step of report.steps) {
    into.push({ runId: report.run.id, position: step.position, depth, step });
    if (step.child) stageRows(step.child, depth + 1, into);
  }
  return into;
}

/** Open questions of a run and of its child runs. */
export function openQuestions(report: RunReport, into: OpenQuestion[] = []): OpenQuestion[] {
  for (const q of report.questions ?? []) into.push({ runId: report.run.id, id: q.id, question: q.question, choices: q.choices });
  for (const step of report.steps) if (step.child) openQuestions(step.child, into);
  return into;
}

export class ConsoleData {
  readonly source: StatusSource;
  private readonly control;

  constructor(
    readonly journal: Journal,
    private readonly home: string,
  ) {
    this.source = new StatusSource(journal, { listCacheMs: 0 });
    this.control = journalControl(journal, { home, by: "tui" });
  }

  /** The first `limit` runs the filter lets through, the page naming the filter it was read with. */
  async runs(filter: RunFilter, limit: number): Promise<RunList> {
    return { ...(await this.source.listRuns({ status: filter.status, workflow: filter.workflow, limit, offset: 0 })), of: filterKey(filter) };
  }

  async run(id: string): Promise<RunRecord> {
    const run = await this.journal.getRun(id as RunRecord["id"]);
    if (!run) throw new UsageError("unknown_run", `no run with id ${id}`);
    return run;
  }

  /** The run's report and totals (as the status page's detail has them, without its graph, read every refresh). */
  async detail(id: string): Promise<RunDetail> {
    const run = await this.run(id);
    const report = (await buildRunReport(this.journal, run.id)) ?? { run, status: run.status, steps: [] };
    const totals = reportTotals(report);
    const summary = await this.source.summaries.summarize(report.run, []);
    return { run: { ...summary, status: report.status, stages: totals.stages, usage: totals.usage }, report, totals };
  }

  /**
   * The attach view of one stage, for the stage pane: its conversation so far, then live (model text,
   * tool calls, usage, attempts, messages and their delivery states), and what is typed into it sent
   * as `atomic attach` sends it. `path`: the stage's path from the root run. The caller closes it.
   */
  async attach(runId: string, position: string, path: string): Promise<AttachFeed> {
    const cut = path.lastIndexOf("/");
    const feed = await AttachFeed.open(this.journal, this.home, await this.run(runId), position, { pathPrefix: cut > 0 ? path.slice(0, cut) : "" });
    feed.start();
    return feed;
  }

  /** Pause, unpause or cancel: a sentence saying what was done. */
  async act(runId: string, action: ControlAction): Promise<string> {
    const r = await this.control.control(await this.run(runId), action);
    if (r.result === "cancelled") return `run ${runId} cancelled`;
    if (r.result === "ended_otherwise") return `run ${runId} had already ended`;
    return `${action} of run ${runId} requested`;
  }

  /** Pause or unpause one stage (its path from the root run), as atomic pause RUN STAGE: a sentence saying what was done. */
  async pauseStage(rootId: string, path: string, paused: boolean): Promise<string> {
    await this.control.control(await this.run(rootId), paused ? "pause" : "unpause", path);
    return paused ? `stage ${path} of run ${rootId} paused` : `stage ${path} of run ${rootId} unpaused`;
  }

  async answer(q: OpenQuestion, text: string): Promise<string> {
    const r = await this.control.answer(await this.run(q.runId), { question: q.id, answer: text });
    return r.status === "answered" ? `question ${q.id} answered: ${JSON.stringify(text)}` : `question ${q.id} was already answered: ${JSON.stringify(r.answer)}`;
  }

  /**
   * `atomic resume RUN` or `atomic rerun RUN`, driven apart from this console: left to the service when one
   * runs (`--detach`), else by a background `atomic` process of its own whose output goes to a log file in the
   * home. A sentence saying which.
   */
  async drive(command: "resume" | "rerun", runId: string): Promise<string> {
    const service = command === "resume" && (await activeService(this.journal));
    const dir = join(this.home, "tui");
    mkdirSync(dir, { recursive: true });
    const log = join(dir, `${command}-${runId}.log`);
    const fd = openSync(log, "a");
    try {
      const proc = Bun.spawn(selfCommand(command, runId, ...(service ? ["--detach"] : ["--quiet"])), { stdin: "ignore", stdout: fd, stderr: fd, detached: true });
      proc.unref();
      if (service) {
        const code = await proc.exited;
        return code === 0 ? `run ${runId} resumed: left to the service` : `atomic resume ${runId} failed (exit ${code}); see ${log}`;
      }
      // A refusal (nothing to resume, a workflow file gone) comes at once; a drive goes on after the console.
      const early = await Promise.race([proc.exited, Bun.sleep(1500).then(() => undefined)]);
      if (early !== undefined && early !== 0) return `atomic ${command} ${runId} failed (exit ${early}); see ${log}`;
      return `atomic ${command} ${runId} runs in the background (pid ${proc.pid}; output in ${log})`;
    } finally {
      closeSync(fd);
    }
  }

  close(): Promise<void> {
    return this.source.close();
  }
}
