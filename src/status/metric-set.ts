/**
 * The metrics `/metrics` exposes, declared once through prom-client in a
 * registry of their own (no process-global state), rendered in the
 * OpenMetrics text format. What fills them is status/metrics.ts, from the
 * journal (docs/design/observability.md says why the journal and not the
 * process that runs the stages).
 *
 * Labels are bounded: workflow names, runner kinds, model names, run
 * statuses, worker host ids; never a run or stage id.
 *
 * Token and cost sums are kept here as exact integers (costs in
 * micro-dollars, as the journal keeps them) and copied into the counters
 * at each scrape, so `atomic_cost_usd_total` is one division of an exact
 * sum, the same figure `atomic show` prints.
 */

import { Counter, Gauge, Histogram, Registry, type OpenMetricsContentType } from "prom-client";
import type { Usage } from "../sdk/types.ts";
import { APPEND_BUCKETS, type AppendLatencyRecord } from "../engine/append-latency.ts";

/** Stage durations and queue waits, in seconds. */
const DURATION_BUCKETS = [0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600];
const WAIT_BUCKETS = [0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600];

export const TOKEN_KINDS = ["input", "output", "cache_read", "cache_write"] as const;

interface UsageKey {
  workflow: string;
  runner: string;
  model: string;
}

interface UsageSum extends UsageKey {
  tokens: Record<(typeof TOKEN_KINDS)[number], number>;
  costMicroUsd: number;
}

export class MetricSet {
  readonly registry = openMetricsRegistry();
  private readonly sums = new Map<string, UsageSum>();

  readonly runs = new Gauge({ name: "atomic_runs", help: "Root runs by status.", labelNames: ["status"], registers: [this.registry] });
  readonly stagesStarted = new Counter({ name: "atomic_stages_started_total", help: "Stage attempts started.", registers: [this.registry] });
  readonly stagesCompleted = new Counter({ name: "atomic_stages_completed_total", help: "Stages completed.", registers: [this.registry] });
  readonly stagesFailed = new Counter({ name: "atomic_stages_failed_total", help: "Stage attempts failed.", registers: [this.registry] });
  readonly appends = new Counter({ name: "atomic_journal_appends_total", help: "Events appended to the journal.", registers: [this.registry] });
  readonly tokens = new Counter({
    name: "atomic_tokens_total",
    help: "Tokens used by agent stages (every attempt), by kind: input (cache reads excluded), output, cache_read, cache_write.",
    labelNames: ["workflow", "runner", "model", "kind"],
    registers: [this.registry],
  });
  readonly cost = new Counter({
    name: "atomic_cost_usd_total",
    help: "Cost of agent stages in US dollars (every attempt), as atomic show sums it.",
    labelNames: ["workflow", "runner", "model"],
    registers: [this.registry],
  });
  readonly turns = new Counter({ name: "atomic_model_turns_total", help: "Model turns of agent stages.", labelNames: ["workflow", "runner", "model"], registers: [this.registry] });
  readonly stageDuration = new Histogram({
    name: "atomic_stage_duration_seconds",
    help: "Stage attempts from their start on a worker to their end, by how they ended.",
    labelNames: ["workflow", "runner", "outcome"],
    buckets: DURATION_BUCKETS,
    registers: [this.registry],
  });
  readonly queueWait = new Histogram({
    name: "atomic_stage_queue_wait_seconds",
    help: "Pooled stage attempts: from the workflow starting them to a worker starting them.",
    labelNames: ["workflow", "runner"],
    buckets: WAIT_BUCKETS,
    registers: [this.registry],
  });
  readonly providerErrors = new Counter({
    name: "atomic_provider_errors_total",
    help: "Stage attempts failed by their model provider (error codes provider_*), by runner and code.",
    labelNames: ["provider", "code"],
    registers: [this.registry],
  });
  readonly providerRetries = new Counter({
    name: "atomic_provider_retries_total",
    help: "Model calls retried after a provider error (hidden by the retry), by runner and code.",
    labelNames: ["provider", "code"],
    registers: [this.registry],
  });
  readonly rateLimitWaits = new Counter({
    name: "atomic_rate_limit_waits_total",
    help: "Model calls that waited for their provider's rate limit (shared back-off or their own 429s), by runner.",
    labelNames: ["provider"],
    registers: [this.registry],
  });
  readonly rateLimitWaitSeconds = new Counter({
    name: "atomic_rate_limit_wait_seconds_total",
    help: "Time model calls spent waiting for their provider's rate limit, by runner.",
    labelNames: ["provider"],
    registers: [this.registry],
  });
  readonly appendLatency = new Histogram({
    name: "atomic_journal_append_seconds",
    help: "Journal appends of run drives, from a step handing its record over to its commit (recorded when a drive ends).",
    buckets: [...APPEND_BUCKETS],
    registers: [this.registry],
  });
  readonly spansDropped = new Counter({
    name: "atomic_trace_spans_dropped_total",
    help: "Spans run drives ended that did not reach their OTLP receiver (queue full, export failed, or unsent when the drive ended).",
    registers: [this.registry],
  });
  readonly questions = new Gauge({ name: "atomic_questions_waiting", help: "ctx.ask questions waiting for an answer.", registers: [this.registry] });
  readonly workerSlots = new Gauge({
    name: "atomic_worker_slots",
    help: "Worker host slots (live hosts of a shared journal), busy or free.",
    labelNames: ["host", "state"],
    registers: [this.registry],
  });

  /** Adds one attempt's usage (exact integers). */
  addUsage(key: UsageKey, usage: Partial<Usage>): void {
    const id = `${key.workflow}\u0000${key.runner}\u0000${key.model}`;
    let sum = this.sums.get(id);
    if (!sum) {
      sum = { ...key, tokens: { input: 0, output: 0, cache_read: 0, cache_write: 0 }, costMicroUsd: 0 };
      this.sums.set(id, sum);
    }
    sum.tokens.input += usage.inputTokens ?? 0;
    sum.tokens.output += usage.outputTokens ?? 0;
    sum.tokens.cache_read += usage.cacheReadTokens ?? 0;
    sum.tokens.cache_write += usage.cacheWriteTokens ?? 0;
    sum.costMicroUsd += usage.costMicroUsd ?? 0;
    this.turns.inc({ workflow: key.workflow, runner: key.runner, model: key.model }, usage.turns ?? 0);
  }

  /**
   * Adds a drive's append histogram (exact bucket counts and sum). The
   * histogram takes single observations: each bucket's appends are observed
   * at one value inside that bucket, the values chosen so that they add up
   * to the recorded sum (each bucket's share raised from its lower bound
   * towards its upper one, the slowest, past the last bound, taking what
   * is left).
   */
  addAppendLatency(r: AppendLatencyRecord): void {
    const slower = r.count - r.buckets.reduce((a, b) => a + b, 0);
    const groups = [...r.buckets.map((n, i) => ({ n, lo: i === 0 ? 0 : APPEND_BUCKETS[i - 1]!, hi: APPEND_BUCKETS[i]! })), { n: slower, lo: APPEND_BUCKETS.at(-1)!, hi: Infinity }];
    const tiny = 1e-9;
    let slack = r.sumMs / 1000 - groups.reduce((a, g) => a + g.n * (g.lo + tiny), 0);
    for (const g of groups) {
      if (g.n <= 0) continue;
      const take = Math.max(0, Math.min(slack, g.n * (g.hi - g.lo - 2 * tiny)));
      slack -= take;
      const v = g.lo + tiny + take / g.n;
      for (let k = 0; k < g.n; k++) this.appendLatency.observe(v);
    }
  }

  /** Renders every metric; token and cost counters are set from the exact sums first. */
  async render(): Promise<string> {
    this.tokens.reset();
    this.cost.reset();
    for (const s of this.sums.values()) {
      const labels = { workflow: s.workflow, runner: s.runner, model: s.model };
      for (const kind of TOKEN_KINDS) this.tokens.inc({ ...labels, kind }, s.tokens[kind]);
      this.cost.inc(labels, s.costMicroUsd / 1_000_000);
    }
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

function openMetricsRegistry(): Registry<OpenMetricsContentType> {
  const registry = new Registry<OpenMetricsContentType>();
  registry.setContentType(Registry.OPENMETRICS_CONTENT_TYPE);
  return registry;
}
