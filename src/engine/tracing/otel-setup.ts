/**
 * The OpenTelemetry SDK as atomic sets it up when traces are on (imported
 * only then, through ./otel-tracer.ts): a tracer provider with
 *
 * - the resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
 *   (service.name defaults to "atomic");
 * - the sampler OTEL_TRACES_SAMPLER names (default parentbased_always_on);
 * - ids that can be chosen per span (./trace-ids.ts derives them from run
 *   ids), random otherwise;
 * - a batch processor and the OTLP/HTTP exporter of the protocol asked
 *   for (protobuf or JSON), which reads its endpoint, headers and timeout
 *   from the standard variables itself; an export that fails is one
 *   warning on stderr per process, and the run goes on;
 * - a tally of the spans handed to that processor and of those the
 *   receiver took (`SpanTally`): the difference is what was dropped (the
 *   queue full, an export failed, or not sent when the last flush gave up).
 */

import { TraceFlags, type Context } from "@opentelemetry/api";
import { ExportResultCode, type ExportResult } from "@opentelemetry/core";
import { OTLPTraceExporter as ProtobufExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { OTLPTraceExporter as JsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  RandomIdGenerator,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type IdGenerator,
  type ReadableSpan,
  type Sampler,
  type Span,
  type SpanExporter,
  type SpanProcessor,
} from "@opentelemetry/sdk-trace";
import { readEnv } from "../../shared/config/environment.ts";
import { atomicResource } from "./otel-resource.ts";
import type { TraceSettings } from "./types.ts";

/** Random ids, unless the next span's are set (`next`), for the span about to start. */
export class ChosenIds implements IdGenerator {
  private readonly random = new RandomIdGenerator();
  nextTraceId: string | undefined;
  nextSpanId: string | undefined;

  generateTraceId(): string {
    const id = this.nextTraceId ?? this.random.generateTraceId();
    this.nextTraceId = undefined;
    return id;
  }

  generateSpanId(): string {
    const id = this.nextSpanId ?? this.random.generateSpanId();
    this.nextSpanId = undefined;
    return id;
  }
}

let warned = false;

/** Says once per process, on stderr, that traces could not be sent. */
export function exportFailed(why: string): void {
  if (warned) return;
  warned = true;
  process.stderr.write(`warning: traces could not be sent to the OTLP receiver (${why}); runs go on without them (hint: check OTEL_EXPORTER_OTLP_ENDPOINT).\n`);
}

/** Sampled spans this process ended (`ended`, handed to the batch processor) and those its receiver took (`sent`). */
export interface SpanTally {
  ended: number;
  sent: number;
}

/** The batch processor, counting the sampled spans handed to it (those it may export). */
class Counted implements SpanProcessor {
  constructor(
    private readonly inner: SpanProcessor,
    private readonly tally: SpanTally,
  ) {}

  onStart(span: Span, parent: Context): void {
    this.inner.onStart(span, parent);
  }

  onEnd(span: ReadableSpan): void {
    if (span.spanContext().traceFlags & TraceFlags.SAMPLED) this.tally.ended++;
    this.inner.onEnd(span);
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
}

/**
 * An exporter that says once that exports fail (a receiver down, a bad key),
 * counts the spans sent, and knows the exports still waiting for their
 * answer (`answered()`): the batch processor's forceFlush sends what is
 * queued but does not wait for a batch its timer already handed over, so a
 * drive that ended while that batch was on its way exited without it
 * (and without a warning).
 */
class WarnOnce implements SpanExporter {
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly inner: SpanExporter,
    private readonly tally: SpanTally,
  ) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    let settle!: () => void;
    const answer = new Promise<void>((resolve) => (settle = resolve));
    this.inFlight.add(answer);
    this.inner.export(spans, (result) => {
      this.inFlight.delete(answer);
      settle();
      if (result.code === ExportResultCode.SUCCESS) this.tally.sent += spans.length;
      else exportFailed(result.error?.message?.split("\n")[0] ?? "no answer");
      done(result);
    });
  }

  /** Resolves once every export started so far has had its answer (or failed). */
  async answered(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

function samplerFromEnv(): Sampler {
  const name = readEnv("OTEL_TRACES_SAMPLER")?.trim().toLowerCase() ?? "parentbased_always_on";
  const arg = Number(readEnv("OTEL_TRACES_SAMPLER_ARG") ?? "1");
  const ratio = Number.isFinite(arg) && arg >= 0 && arg <= 1 ? arg : 1;
  switch (name) {
    case "always_on":
      return new AlwaysOnSampler();
    case "always_off":
      return new AlwaysOffSampler();
    case "traceidratio":
      return new TraceIdRatioBasedSampler(ratio);
    case "parentbased_always_off":
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case "parentbased_traceidratio":
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) });
    default:
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
  }
}

/** A drive's last flush waits this long at most when no export timeout is set: a receiver that is down does not hold the drive's end. */
const FLUSH_MS = 3_000;

/**
 * How long a drive's last flush may wait for its receiver: the export timeout
 * the user set (OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, else OTEL_EXPORTER_OTLP_TIMEOUT,
 * in ms), for a receiver known to be slow to answer; else FLUSH_MS.
 */
export function flushLimitMs(): number {
  for (const set of [readEnv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"), readEnv("OTEL_EXPORTER_OTLP_TIMEOUT")]) {
    const ms = Number(set?.trim());
    if (set !== undefined && Number.isFinite(ms) && ms > 0) return ms;
  }
  return FLUSH_MS;
}

/** The provider, and `flush()`: sends what is queued and waits until every batch sent so far has its answer (unbounded: the caller bounds it). */
export function createProvider(settings: TraceSettings, ids: ChosenIds, tally: SpanTally): { provider: TracerProvider; flush(): Promise<void> } {
  const resource = atomicResource();
  const exporter = new WarnOnce(settings.protocol === "http/json" ? new JsonExporter() : new ProtobufExporter(), tally);
  const provider = new TracerProvider({
    resource,
    sampler: samplerFromEnv(),
    idGenerator: ids,
    spanProcessors: [new Counted(new BatchSpanProcessor({ exporter, scheduledDelayMillis: 1000 }), tally)],
  });
  return {
    provider,
    flush: async () => {
      await provider.forceFlush().catch(() => {});
      await exporter.answered();
    },
  };
}
