/**
 * The status server's read-only view of the journal: run lists, run detail
 * (report, graph, totals), events after a seq, stage output, event streams
 * and metrics. The Hono app (app.ts) only maps these to HTTP.
 */

import type { RunOrigin } from "../engine/fork.ts";
import { EVENT } from "../engine/journal-events.ts";
import { buildRunReport, type RunReport, type StepReport } from "../engine/run-report.ts";
import { explainQueueWaits } from "../engine/queue-waits.ts";
import type { Journal } from "../journal/journal.ts";
import type { JournalEvent, RunRecord } from "../journal/runs.ts";
import type { ErrorInfo } from "../shared/errors.ts";
import { parseRunRef } from "../shared/ids.ts";
import { buildRunGraph, type RunGraph } from "./graph.ts";
import { JournalMetrics } from "./metrics.ts";
import { LiveHub } from "./live-hub.ts";
import { checkStageCursor, openStageStream } from "./stage-stream.ts";
import type { RunId } from "../shared/ids.ts";
import { StreamHub, DEFAULT_STREAM_OPTIONS, type StreamOptions } from "./stream-hub.ts";
import { RunSummaries, type RunListPage, type RunListQuery, type RunSummary } from "./summaries.ts";
import { reportTotals, type RunTotals } from "./totals.ts";
import { attemptDir, readTranscript, type Transcript } from "./transcript.ts";
import { openStageFiles } from "../artifacts/stage-files.ts";
import type { ArtifactStore } from "../artifacts/store.ts";

/**
 * What the local service in this process tells the page (src/service/): which runs it drove to
 * recover or wake them. Absent when the server runs without the service (`atomic run --serve`).
 */
export interface ServiceView {
  readonly current: string;
  /** How many drives the service started for this run since it started, if any. */
  drivesOf(runId: string): number | undefined;
  describe(): unknown;
}

export interface RunDetail {
  run: RunSummary & {
    rootId: string;
    parentId: string | null;
    parentKey: string | null;
    depth: number;
    workflowPath: string;
    inputs: unknown;
    outputs: unknown;
    errorInfo: ErrorInfo | null;
    holder?: { holderId: string; host: string; pid: number };
    /** The run it reruns or forks. */
    origin?: RunOrigin;
    /** How many times the local service resumed this run (its run_resumed events say so). */
    recoveredByService: number;
  };
  report: RunReport;
  graph: RunGraph;
  totals: RunTotals;
}

export interface EventsPage {
  runId: string;
  events: JournalEvent[];
  /** The run's last seq when read. */
  lastSeq: number;
  /** Ask for `after=next` to go on. */
  next: number;
  more: boolean;
}

/** A failed lookup: `miss` is the error code the API answers with (404, or 409 for "ambiguous"). */
export interface Miss {
  miss: "unknown_run" | "unknown_stage" | "ambiguous" | "no_output";
  message: string;
  hint?: string;
}

/**
 * How many times the local service recovered a run: its drives (run_resumed
 * by the service) that continued what another drive had started. A drive
 * right after the run was recorded or resumed elsewhere (nothing happened
 * in between but the results a fork copied) is the first drive of a run left to the service (`run
 * --detach`, a schedule's tick, a start from the API or the page, `resume
 * --detach`), not a recovery.
 */
export function recoveries(events: readonly JournalEvent[]): number {
  let n = 0;
  for (let i = 1; i < events.length; i++) {
    const e = events[i]!;
    if (e.type !== EVENT.runResumed || (e.payload as { drivenBy?: unknown }).drivenBy !== "service") continue;
    // What the previous drive did, leaving out the results a fork copied in (engine/fork.ts: `reusedFrom`).
    let j = i - 1;
    while (j > 0 && (events[j]!.payload as { reusedFrom?: unknown } | null)?.reusedFrom !== undefined) j--;
    const before = events[j]!.type;
    if (before !== EVENT.runStarted && before !== EVENT.runResumed) n++;
  }
  return n;
}

export class StatusSource {
  readonly summaries: RunSummaries;
  readonly metrics: JournalMetrics;
  readonly streams: StreamHub;
  /** The live stage events (model deltas, tool calls) from the broker of `home`; none without a home. */
  readonly live: LiveHub;
  private readonly stageStreams = new Set<() => void>();
  private readonly streamOpts: StreamOptions;
  private readonly listCache = new Map<string, { at: number; body: Promise<string> }>();
  private readonly listCacheMs: number;
  /** Where the files of stages that ran on other hosts are (artifacts/select.ts); undefined: only local files. */
  private readonly artifacts: ArtifactStore | undefined;
  /** The local service running beside this server, if any (set by `atomic serve`). */
  service: ServiceView | undefined;

  constructor(
    readonly journal: Journal,
    opts: { stream?: Partial<StreamOptions>; listCacheMs?: number; artifacts?: ArtifactStore | undefined; home?: string } = {},
  ) {
    this.listCacheMs = opts.listCacheMs ?? 100;
    this.artifacts = opts.artifacts;
    this.summaries = new RunSummaries(journal);
    this.metrics = new JournalMetrics(journal);
    this.streamOpts = { ...DEFAULT_STREAM_OPTIONS, ...opts.stream };
    this.live = new LiveHub(opts.home, journal.fleet?.liveChannel);
    this.streams = new StreamHub(journal, this.streamOpts, this.live);
  }

  /** A run by full id or unique prefix (a root wins over its own children, as in the CLI). */
  async findRun(text: string): Promise<RunRecord | Miss> {
    const id = text.trim().toLowerCase();
    const exact = parseRunRef(id);
    // The exact id first: a generated id, or a caller's key (which is never a generated id's prefix: shared/ids.ts).
    const run = exact ? await this.journal.getRun(exact) : undefined;
    if (run) return run;
    if (/^[0-9a-z]{4,17}$/.test(id)) {
      const found = await this.journal.findRuns(id, 50);
      const roots = found.filter((r) => r.parentId === null);
      if (found.length === 1) return found[0]!;
      if (roots.length === 1 && found.length < 50 && found.every((r) => r.rootId === roots[0]!.id)) return roots[0]!;
      if (found.length > 1) return { miss: "ambiguous", message: `more than one run id starts with ${id}`, hint: "give more of the id" };
    }
    return { miss: "unknown_run", message: `no run with id ${text}`, hint: "list runs with GET /api/runs" };
  }

  async listRuns(q: RunListQuery): Promise<RunListPage> {
    return this.withRecovered(await this.summaries.list(q));
  }

  /**
   * Marks the runs the service of this process recovered (the run list's
   * "recovered" tag): of the runs it drove, those a drive of theirs
   * continued after another driver had stopped (recoveries below), not a
   * run it started (a schedule's, a posted one) nor one a person left to it.
   */
  private async withRecovered(page: RunListPage): Promise<RunListPage> {
    const service = this.service;
    if (!service) return page;
    for (const run of page.runs) {
      if (!service.drivesOf(run.id)) continue;
      const n = recoveries(await this.journal.readEvents(run.id as RunId));
      if (n) run.recovered = n;
    }
    return page;
  }

  /**
   * The run list as JSON text. A list is rebuilt at most once per
   * `listCacheMs` for the same query (and concurrent requests share one
   * build): pages and watchers poll it, and a list as fresh as the event
   * streams' poll interval is fresh enough. Building one costs a few
   * hundred microseconds (two queries and 50 summaries); answering from
   * the cache costs what the trivial route does. A control request through
   * this server clears the cache, so its effect shows at once.
   */
  listRunsJson(q: RunListQuery, now = Date.now()): Promise<string> {
    const key = JSON.stringify([q.status, q.limit, q.offset, q.tags ?? {}, q.workflow, q.text, q.since, q.until, q.origin]);
    const hit = this.listCache.get(key);
    if (hit && now - hit.at < this.listCacheMs) return hit.body;
    const body = this.listRuns(q).then((page) => JSON.stringify(page));
    if (this.listCache.size > 100) this.listCache.clear();
    this.listCache.set(key, { at: now, body });
    body.catch(() => this.listCache.delete(key));
    return body;
  }

  /** Forget cached lists (after a write through this server). */
  invalidate(): void {
    this.listCache.clear();
  }

  async detail(run: RunRecord): Promise<RunDetail> {
    const report = (await buildRunReport(this.journal, run.id)) ?? { run, status: run.status, steps: [] };
    await explainQueueWaits(this.journal, report);
    // Stage counts and usage come from the report here (it is read anyway): no tally needed.
    const summary = await this.summaries.summarize(report.run, []);
    const totals = reportTotals(report);
    return {
      run: {
        ...summary,
        status: report.status,
        stages: totals.stages,
        usage: totals.usage,
        rootId: run.rootId,
        parentId: run.parentId,
        parentKey: run.parentKey,
        depth: run.depth,
        workflowPath: run.workflowPath,
        inputs: run.inputs,
        outputs: run.outputs,
        errorInfo: run.error,
        ...(report.holder ? { holder: report.holder } : {}),
        ...(report.origin ? { origin: report.origin } : {}),
        recoveredByService: await this.recoveredByService(run),
      },
      report,
      graph: buildRunGraph(report),
      totals,
    };
  }

  private async recoveredByService(run: RunRecord): Promise<number> {
    if (run.parentId !== null) return 0;
    return recoveries(await this.journal.readEvents(run.id));
  }

  async events(run: RunRecord, after: number, limit: number): Promise<EventsPage> {
    const events = await this.journal.readEvents(run.id, after, limit + 1);
    const more = events.length > limit;
    if (more) events.length = limit;
    const lastSeq = Math.max(run.lastSeq, events.at(-1)?.seq ?? 0);
    return { runId: run.id, events, lastSeq, next: events.at(-1)?.seq ?? after, more };
  }

  /**
   * The output of a stage of `run`: `stage` is its position in that run
   * ("2.0.1"), its path through child runs ("summarize/report") or its name
   * when only one stage has it.
   */
  async transcript(
    run: RunRecord,
    stage: string,
    q: { attempt?: number | undefined; stdout: number; stderr: number; stdoutEnd?: number; turns?: boolean },
    /** The run's report when the caller has just read it (the console reads it for its tree anyway). */
    known?: RunReport,
  ): Promise<Transcript | Miss> {
    const report = known ?? (await buildRunReport(this.journal, run.id));
    if (!report) return { miss: "unknown_run", message: `no run with id ${run.id}` };
    const found = findStep(report, stage);
    if ("miss" in found) return found;
    const { step, runId, live } = found;
    if (step.kind !== "stage") {
      return { miss: "no_output", message: `step ${JSON.stringify(stage)} is a ${step.kind} step; only stages have output` };
    }
    const attempt = q.attempt ?? step.attempts;
    if (attempt < 1 || attempt > Math.max(1, step.attempts)) {
      return { miss: "unknown_stage", message: `stage ${JSON.stringify(step.name)} has no attempt ${attempt} (it has ${step.attempts})` };
    }
    const dir = attemptDir(step, attempt);
    const files = dir ? await openStageFiles(dir, report.run.rootId, this.artifacts) : undefined;
    return readTranscript(runId, step, attempt, { stdout: q.stdout, stderr: q.stderr, stdoutEnd: q.stdoutEnd }, live, q.turns === true, files);
  }

  /**
   * The server-sent events of one stage (stage-stream.ts): `stage` as for `transcript`; `from` a seq of the
   * stage's run (Last-Event-ID), "start" or "now"; a Miss, or `{ error }` for a cursor that cannot resume.
   */
  async stageStream(run: RunRecord, stage: string, from: "start" | "now" | number, signal?: AbortSignal): Promise<ReadableStream<Uint8Array> | Miss | { error: string }> {
    const report = await buildRunReport(this.journal, run.id);
    if (!report) return { miss: "unknown_run", message: `no run with id ${run.id}` };
    const found = findStep(report, stage);
    if ("miss" in found) return found;
    if (found.step.kind !== "stage") {
      return { miss: "no_output", message: `step ${JSON.stringify(stage)} is a ${found.step.kind} step; only stages have a stream`, hint: "name a stage" };
    }
    const runId = found.runId as RunId;
    const known = runId === run.id ? run.lastSeq : 0;
    if (typeof from === "number") {
      const problem = await checkStageCursor(this.journal, runId, known, from);
      if (problem) return { error: problem };
    }
    const target = { runId, position: found.step.position, name: found.step.name };
    const { stream, stop } = openStageStream(this.journal, this.live, target, from, known, this.streamOpts, signal);
    this.stageStreams.add(stop);
    signal?.addEventListener("abort", () => this.stageStreams.delete(stop), { once: true });
    return stream;
  }

  async close(drain = false): Promise<void> {
    for (const stop of this.stageStreams) stop();
    this.stageStreams.clear();
    this.live.close();
    await this.streams.close(drain);
  }
}

interface Found {
  step: StepReport;
  runId: string;
  live: boolean;
}

function findStep(report: RunReport, stage: string): Found | Miss {
  const live = (r: RunReport) => r.status === "running" || r.status === "paused";
  const exact = report.steps.find((s) => s.position === stage);
  if (exact) return { step: exact, runId: report.run.id, live: live(report) };
  const byPath: Found[] = [];
  const byName: Found[] = [];
  const walk = (r: RunReport, prefix: string) => {
    for (const step of r.steps) {
      const path = prefix ? `${prefix}/${step.name}` : step.name;
      if (step.kind === "stage") {
        if (path === stage) byPath.push({ step, runId: r.run.id, live: live(r) });
        if (step.name === stage) byName.push({ step, runId: r.run.id, live: live(r) });
      }
      if (step.child) walk(step.child, path);
    }
  };
  walk(report, "");
  const hits = byPath.length > 0 ? byPath : byName;
  if (hits.length === 1) return hits[0]!;
  if (hits.length > 1) {
    return {
      miss: "ambiguous",
      message: `${hits.length} stages of run ${report.run.id} are named ${JSON.stringify(stage)}`,
      hint: `ask by position (${hits.map((h) => h.step.position).join(", ")}) on the run that holds it`,
    };
  }
  return { miss: "unknown_stage", message: `run ${report.run.id} has no stage ${JSON.stringify(stage)}`, hint: `its stages are listed by GET /api/runs/${report.run.id}` };
}
