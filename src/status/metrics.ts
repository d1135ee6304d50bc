/**
 * `/metrics` in the OpenMetrics text format, through prom-client
 * (status/metric-set.ts declares the metrics):
 *
 * - `atomic_runs{status}`: root runs by the status a user sees (running,
 *   paused and crashed are told apart through the lease).
 * - `atomic_stages_started_total`, `..._completed_total`,
 *   `..._failed_total`: stage attempts started, stages completed, stage
 *   attempts failed, over every run (children included).
 * - `atomic_tokens_total{workflow,runner,model,kind}`,
 *   `atomic_cost_usd_total{workflow,runner,model}`,
 *   `atomic_model_turns_total`: the usage of every stage attempt (the
 *   checkpoint's, a failed attempt's, a cancelled one's), the same sums
 *   `atomic show` makes.
 * - `atomic_stage_duration_seconds{workflow,runner,outcome}` and
 *   `atomic_stage_queue_wait_seconds{workflow,runner}`: histograms from
 *   the attempts' start and end records.
 * - `atomic_provider_errors_total{provider,code}`: attempts failed by
 *   their provider (provider_auth, provider_rate_limit...), by runner.
 * - `atomic_provider_retries_total{provider,code}`,
 *   `atomic_rate_limit_waits_total{provider}`,
 *   `atomic_rate_limit_wait_seconds_total{provider}`: what attempts went
 *   through at their provider without failing (the `providerWaits` of
 *   their end records: model calls retried, calls that waited for a rate
 *   limit and how long).
 * - `atomic_journal_append_seconds`: a histogram of the journal appends of
 *   run drives (the `appendLatency` of a root's end record; a drive killed
 *   before its end adds nothing).
 * - `atomic_questions_waiting`, `atomic_worker_slots{host,state}`: read
 *   at each scrape (open prompts of live runs; live worker hosts).
 * - `atomic_journal_appends_total`: events appended to the journal (the sum
 *   of every run's last seq).
 * - `atomic_trace_spans_dropped_total`: spans that drives ended and did not
 *   get to their OTLP receiver, as the drives counted them in the journal
 *   (journal/counters.ts), read at each scrape.
 *
 * The journal is the source: runs are driven by other processes (`atomic
 * run`, the service's spawned runs, worker hosts), and whatever serves
 * /metrics reads what they recorded.
 *
 * Work per scrape follows what changed since the previous one and the
 * runs still open, not the number of runs: the journal numbers every
 * creation, patch (status, outputs...) and deletion of a run
 * (JournalViews.changesSince), and this keeps the last number it saw (the
 * cursor), each run's last seq and stored status, and the counters. A
 * scrape reads the runs that changed and the events they appended since
 * (folded into the counters); then each open run (running or
 * awaiting input, at any depth): its row, for the events it appended
 * without a change number (a step's records are not changes), and for a
 * root its lease (its shown status moves with time, without any change to
 * its row). The first scrape reads everything once. A run
 * deleted by retention (`atomic gc`) comes as a change marked `deleted`:
 * it leaves the runs gauge; the counters keep what it added (they count
 * what happened, and a counter never goes down).
 */

import { EVENT, type CheckpointPayload, type StatusChangedPayload, type StepStartedPayload } from "../engine/journal-events.ts";
import type { ProviderWaitsRecord } from "../engine/steps/provider-waits.ts";
import { shownStatus } from "../journal/run-status.ts";
import type { Journal } from "../journal/journal.ts";
import { RUN_STATUSES, type JournalEvent, type RunStatus, type ShownStatus } from "../journal/runs.ts";
import type { RunChange } from "../journal/views.ts";
import type { RunId } from "../shared/ids.ts";
import type { StageResult, Usage } from "../sdk/types.ts";
import { shownHostState } from "../journal/fleet-view.ts";
import { MetricSet } from "./metric-set.ts";
import type { Registry } from "prom-client";

/** Every metric with its values, as prom-client lists them (a histogram's values name their `_bucket`, `_sum` or `_count` series). */
export type MetricsSnapshot = Awaited<ReturnType<Registry["getMetricsAsJSON"]>>;

const SHOWN: readonly ShownStatus[] = [...RUN_STATUSES, "paused", "crashed"];
/** Stored statuses whose shown status depends on the lease (and the clock). */
const LIVE: ReadonlySet<RunStatus> = new Set(["running", "awaiting_input"]);
const CHANGES_PAGE = 1000;
const EVENTS_PAGE = 2000;

export class JournalMetrics {
  private cursor = 0;
  /** Per run: the last seq folded into the counters; for roots also the stored status counted in `roots`. */
  private readonly seen = new Map<string, { lastSeq: number; status: RunStatus | null; workflow: string }>();
  /** Stage attempts started and not yet ended (run, key): their runner and when the workflow queued them. */
  private readonly attempts = new Map<string, { runner: string; requestedAt?: number }>();
  private readonly set = new MetricSet();
  /** Root runs by stored status (live ones are looked at on every scrape). */
  private readonly roots = new Map<RunStatus, number>();
  /** Runs whose stored status is open (LIVE), at any depth: true for a root. */
  private readonly open = new Map<RunId, boolean>();
  private scraping: Promise<string> | undefined;

  constructor(private readonly journal: Journal) {}

  /** Concurrent scrapes share one pass over the journal. */
  render(): Promise<string> {
    this.scraping ??= this.scrape().finally(() => (this.scraping = undefined));
    return this.scraping;
  }

  private async scrape(): Promise<string> {
    for (;;) {
      const changes = await this.journal.views.changesSince(this.cursor, CHANGES_PAGE);
      for (const change of changes) await this.apply(change);
      if (changes.length > 0) this.cursor = changes.at(-1)!.change;
      if (changes.length < CHANGES_PAGE) break;
    }
    const now = Date.now();
    const byStatus = new Map<ShownStatus, number>(SHOWN.map((st) => [st, LIVE.has(st as RunStatus) ? 0 : (this.roots.get(st as RunStatus) ?? 0)]));
    let questions = 0;
    for (const [id, root] of this.open) {
      const run = await this.journal.getRun(id);
      if (!run) continue;
      const seen = this.seen.get(id);
      if (seen && run.lastSeq > seen.lastSeq) seen.lastSeq = await this.fold(id, seen.lastSeq, run.lastSeq);
      if (!root) continue;
      const shown = shownStatus(run, await this.journal.getLease(run.id), now);
      byStatus.set(shown, (byStatus.get(shown) ?? 0) + 1);
      if (run.status === "awaiting_input") questions += (await this.journal.messages.prompts(id, "open")).length;
    }
    for (const s of SHOWN) this.set.runs.set({ status: s }, byStatus.get(s) ?? 0);
    this.set.questions.set(questions);
    const counters = await this.journal.counters.read();
    this.set.spansDropped.reset();
    this.set.spansDropped.inc(counters.trace_spans_dropped);
    this.set.workerSlots.reset();
    for (const host of (await this.journal.fleet?.hosts()) ?? []) {
      const state = shownHostState(host);
      if (state === "stopped" || state === "lost") continue;
      this.set.workerSlots.set({ host: host.hostId, state: "busy" }, host.busy);
      this.set.workerSlots.set({ host: host.hostId, state: "free" }, Math.max(0, host.slots - host.busy));
    }
    return this.set.render();
  }

  /** Every metric's current values (what `render` prints), for the OTLP export (./otlp-metrics-export.ts). */
  async snapshot(): Promise<MetricsSnapshot> {
    await this.render();
    return this.set.registry.getMetricsAsJSON();
  }

  /** The content type of what `render` returns (OpenMetrics). */
  get contentType(): string {
    return this.set.contentType;
  }

  /** Folds one changed run in: its new events, and (a root) its stored status. */
  private async apply(change: RunChange): Promise<void> {
    const prev = this.seen.get(change.id);
    if (change.deleted) {
      if (prev?.status) this.roots.set(prev.status, (this.roots.get(prev.status) ?? 0) - 1);
      this.open.delete(change.id);
      this.seen.delete(change.id);
      return;
    }
    if (!prev) this.seen.set(change.id, { lastSeq: 0, status: null, workflow: "" });
    const after = await this.fold(change.id, prev?.lastSeq ?? 0, change.lastSeq);
    const root = change.parentId === null;
    if (root && prev?.status) this.roots.set(prev.status, (this.roots.get(prev.status) ?? 0) - 1);
    if (root) this.roots.set(change.status, (this.roots.get(change.status) ?? 0) + 1);
    if (LIVE.has(change.status)) this.open.set(change.id, root);
    else this.open.delete(change.id);
    this.seen.set(change.id, { lastSeq: after, status: root ? change.status : null, workflow: this.seen.get(change.id)!.workflow });
  }

  /** Folds the run's events after `from` up to `to` into the counters; returns the last seq folded. */
  private async fold(id: RunId, from: number, to: number): Promise<number> {
    let after = from;
    while (after < to) {
      const events = await this.journal.readEvents(id, after, EVENTS_PAGE);
      if (events.length === 0) break;
      for (const e of events) this.count(id, e);
      after = events.at(-1)!.seq;
    }
    this.set.appends.inc(after - from);
    return after;
  }

  private count(runId: RunId, e: JournalEvent): void {
    const seen = this.seen.get(runId);
    if (e.type === EVENT.runStarted) {
      if (seen) seen.workflow = String((e.payload as { workflow?: unknown } | null)?.workflow ?? "");
      return;
    }
    if (e.type === EVENT.statusChanged) {
      const latency = (e.payload as StatusChangedPayload | null)?.appendLatency;
      if (latency && Array.isArray(latency.buckets)) this.set.addAppendLatency(latency);
      return;
    }
    const workflow = seen?.workflow || "unknown";
    if (e.type === EVENT.usageRecorded) {
      const u = e.payload as { stageKey: string; usage: Usage };
      // A cancelled attempt's usage: its attempt ends here (the run stopped; a resume starts a new one).
      const id = `${runId}\u0000${u.stageKey}`;
      const runner = this.attempts.get(id)?.runner;
      this.addUsage(workflow, runner, u.usage);
      this.addWaits(runner ?? "unknown", (e.payload as { providerWaits?: ProviderWaitsRecord }).providerWaits);
      this.attempts.delete(id);
      return;
    }
    const p = e.payload as (StepStartedPayload & Partial<CheckpointPayload> & { usage?: Usage; startedAt?: number }) | null;
    if (p?.kind !== "stage" || e.key === null) return;
    const id = `${runId}\u0000${e.key}`;
    if (e.type === EVENT.stepStarted) {
      this.set.stagesStarted.inc();
      this.attempts.set(id, { runner: p.runner ?? "unknown", ...(p.queued ? { requestedAt: p.requestedAt ?? e.at } : {}) });
      return;
    }
    if (e.type !== EVENT.stepFailed && e.type !== EVENT.checkpoint) return;
    const attempt = this.attempts.get(id);
    this.attempts.delete(id);
    const result = p.result as StageResult | undefined;
    const runner = attempt?.runner ?? result?.runner ?? "unknown";
    const usage = e.type === EVENT.checkpoint ? result?.usage : p.usage;
    if (usage) this.addUsage(workflow, runner, usage);
    this.addWaits(runner, (p as { providerWaits?: ProviderWaitsRecord }).providerWaits);
    const outcome = e.type === EVENT.stepFailed ? "failed" : result?.status === "completed" ? "completed" : "failed";
    if (e.type === EVENT.stepFailed) {
      this.set.stagesFailed.inc();
      const code = (p as { error?: { code?: unknown } }).error?.code;
      if (typeof code === "string" && code.startsWith("provider_")) this.set.providerErrors.inc({ provider: runner, code });
    }
    else if (outcome === "completed") this.set.stagesCompleted.inc();
    if (typeof p.startedAt === "number" && p.startedAt > 0) {
      this.set.stageDuration.observe({ workflow, runner, outcome }, Math.max(0, e.at - p.startedAt) / 1000);
      if (attempt?.requestedAt !== undefined && p.startedAt >= attempt.requestedAt) this.set.queueWait.observe({ workflow, runner }, (p.startedAt - attempt.requestedAt) / 1000);
    }
  }

  /** What an attempt waited for and retried at its provider (engine/steps/provider-waits.ts). */
  private addWaits(runner: string, w: ProviderWaitsRecord | undefined): void {
    if (!w) return;
    if (w.rateLimitWaits > 0) {
      this.set.rateLimitWaits.inc({ provider: runner }, w.rateLimitWaits);
      this.set.rateLimitWaitSeconds.inc({ provider: runner }, w.rateLimitWaitMs / 1000);
    }
    for (const [code, n] of Object.entries(w.retried ?? {})) if (n > 0) this.set.providerRetries.inc({ provider: runner, code }, n);
  }

  private addUsage(workflow: string, runner: string | undefined, usage: Usage): void {
    this.set.addUsage({ workflow, runner: runner ?? "unknown", model: usage.model ?? "unknown" }, usage);
  }
}
