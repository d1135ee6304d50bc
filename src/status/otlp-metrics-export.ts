/**
 * The OpenTelemetry metrics SDK as atomic sets it up when OTLP metrics are
 * on (imported only then, through ./otlp-metrics.ts): a MeterProvider with
 * atomic's resource and a periodic reader whose one producer reads the
 * `/metrics` registry (status/metric-set.ts), so that both say the same
 * numbers; the OTLP/HTTP metric exporter of the protocol asked for
 * (protobuf or JSON) reads its endpoint, headers and timeout from the
 * standard variables itself.
 *
 * How a prom-client metric becomes an OTLP one (docs/design/observability.md):
 * a counter a cumulative monotonic sum named without its `_total` (an OTLP
 * receiver that writes Prometheus adds it back), a gauge a gauge, a
 * histogram an explicit-bucket histogram with the same bounds (its
 * cumulative `le` counts turned into per-bucket ones); labels become
 * attributes. Sums start when the export started: the counters count
 * from the journal's beginning at the first collection.
 *
 * An export that fails is one warning on stderr per process; serving goes on.
 */

import { ValueType, type Attributes, type HrTime } from "@opentelemetry/api";
import { ExportResultCode, hrTime, type ExportResult } from "@opentelemetry/core";
import { OTLPMetricExporter as JsonExporter } from "@opentelemetry/exporter-metrics-otlp-http";
import { OTLPMetricExporter as ProtobufExporter } from "@opentelemetry/exporter-metrics-otlp-proto";
import {
  AggregationTemporality,
  DataPointType,
  MeterProvider,
  PeriodicExportingMetricReader,
  type CollectionResult,
  type DataPoint,
  type Histogram,
  type InstrumentType,
  type MetricData,
  type MetricProducer,
  type PushMetricExporter,
  type ResourceMetrics,
} from "@opentelemetry/sdk-metrics";
import { atomicResource } from "../engine/tracing/otel-resource.ts";
import { VERSION } from "../shared/version.ts";
import type { JournalMetrics, MetricsSnapshot } from "./metrics.ts";

export interface OtlpMetricSettings {
  protocol: "http/protobuf" | "http/json";
  intervalMs: number;
  timeoutMs: number;
}

/** A running export: `stop` sends what the instruments hold once more, then ends it. */
export interface OtlpMetricExport {
  stop(): Promise<void>;
}

const SCOPE = { name: "atomic", version: VERSION };

type Snapshot = MetricsSnapshot[number];
type Value = Snapshot["values"][number] & { metricName?: string };

let warned = false;

/** Says once per process, on stderr, that metrics could not be sent. */
function exportFailed(why: string): void {
  if (warned) return;
  warned = true;
  process.stderr.write(`warning: metrics could not be sent to the OTLP receiver (${why}); /metrics still serves them (hint: check OTEL_EXPORTER_OTLP_ENDPOINT).\n`);
}

/** An exporter that says once that exports fail (a receiver down, a bad key). */
class WarnOnce implements PushMetricExporter {
  constructor(private readonly inner: PushMetricExporter) {}

  export(metrics: ResourceMetrics, done: (result: ExportResult) => void): void {
    this.inner.export(metrics, (result) => {
      if (result.code !== ExportResultCode.SUCCESS) exportFailed(result.error?.message?.split("\n")[0] ?? "no answer");
      done(result);
    });
  }

  selectAggregationTemporality(type: InstrumentType): AggregationTemporality {
    return this.inner.selectAggregationTemporality?.(type) ?? AggregationTemporality.CUMULATIVE;
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
}

/** The `/metrics` registry's values, as OTLP metric data. */
class RegistryProducer implements MetricProducer {
  private readonly start = hrTime();

  constructor(private readonly metrics: JournalMetrics) {}

  async collect(): Promise<CollectionResult> {
    const resourceMetrics: ResourceMetrics = { resource: atomicResource(), scopeMetrics: [] };
    try {
      const snapshot = await this.metrics.snapshot();
      const now = hrTime();
      resourceMetrics.scopeMetrics.push({ scope: SCOPE, metrics: snapshot.map((m) => toMetricData(m, this.start, now)).filter((m) => m !== undefined) });
      return { resourceMetrics, errors: [] };
    } catch (err) {
      exportFailed(`the journal could not be read: ${err instanceof Error ? err.message : String(err)}`);
      return { resourceMetrics, errors: [err] };
    }
  }
}

export function exportMetrics(metrics: JournalMetrics, settings: OtlpMetricSettings): OtlpMetricExport {
  const exporter = settings.protocol === "http/json" ? new JsonExporter() : new ProtobufExporter();
  const reader = new PeriodicExportingMetricReader({
    exporter: new WarnOnce(exporter),
    exportIntervalMillis: settings.intervalMs,
    exportTimeoutMillis: settings.timeoutMs,
    metricProducers: [new RegistryProducer(metrics)],
  });
  const provider = new MeterProvider({ resource: atomicResource(), readers: [reader] });
  return {
    // The reader's shutdown collects and exports once more, then ends the exporter.
    stop: () => provider.shutdown({ timeoutMillis: settings.timeoutMs }).catch((err: unknown) => exportFailed(err instanceof Error ? err.message : String(err))),
  };
}

/** One prom-client metric as OTLP metric data; undefined for a type atomic does not use (summaries). */
export function toMetricData(m: Snapshot, startTime: HrTime, endTime: HrTime): MetricData | undefined {
  const values = m.values as Value[];
  const point = <T>(attributes: Attributes, value: T): DataPoint<T> => ({ startTime, endTime, attributes, value });
  const descriptor = (name: string, valueType: ValueType) => ({ name, description: m.help, unit: unitOf(m.name), valueType });
  switch (String(m.type)) {
    case "counter": {
      // An OpenMetrics registry keeps counter names without `_total` (it adds it when printing); others keep it.
      const name = m.name.replace(/_total$/, "");
      return {
        descriptor: descriptor(name, valueTypeOf(m.name)),
        aggregationTemporality: AggregationTemporality.CUMULATIVE,
        dataPointType: DataPointType.SUM,
        isMonotonic: true,
        dataPoints: values.map((v) => point(attributesOf(v.labels), v.value)),
      };
    }
    case "gauge":
      return {
        descriptor: descriptor(m.name, valueTypeOf(m.name)),
        aggregationTemporality: AggregationTemporality.CUMULATIVE,
        dataPointType: DataPointType.GAUGE,
        dataPoints: values.map((v) => point(attributesOf(v.labels), v.value)),
      };
    case "histogram":
      return {
        descriptor: descriptor(m.name, ValueType.DOUBLE),
        aggregationTemporality: AggregationTemporality.CUMULATIVE,
        dataPointType: DataPointType.HISTOGRAM,
        dataPoints: histogramPoints(m.name, values).map(({ attributes, value }) => point(attributes, value)),
      };
    default:
      return undefined;
  }
}

/** A histogram's series, one per label set: the `le` buckets (cumulative) as per-bucket counts, with the sum and count. */
function histogramPoints(name: string, values: Value[]): { attributes: Attributes; value: Histogram }[] {
  const series = new Map<string, { attributes: Attributes; bounds: [number, number][]; sum: number; count: number }>();
  for (const v of values) {
    const { le, ...labels } = v.labels as Record<string, string | number>;
    const attributes = attributesOf(labels);
    const id = JSON.stringify(Object.entries(attributes).sort(([a], [b]) => a.localeCompare(b)));
    let s = series.get(id);
    if (!s) series.set(id, (s = { attributes, bounds: [], sum: 0, count: 0 }));
    if (v.metricName === `${name}_sum`) s.sum = v.value;
    else if (v.metricName === `${name}_count`) s.count = v.value;
    else if (v.metricName === `${name}_bucket` && le !== undefined && le !== "+Inf") s.bounds.push([Number(le), v.value]);
  }
  return [...series.values()].map((s) => {
    s.bounds.sort((a, b) => a[0] - b[0]);
    const counts = s.bounds.map(([, cumulative], i) => cumulative - (i === 0 ? 0 : s.bounds[i - 1]![1]));
    counts.push(s.count - (s.bounds.at(-1)?.[1] ?? 0));
    return { attributes: s.attributes, value: { buckets: { boundaries: s.bounds.map(([b]) => b), counts }, sum: s.sum, count: s.count } };
  });
}

function attributesOf(labels: Record<string, string | number | undefined> | undefined): Attributes {
  const out: Attributes = {};
  for (const [k, v] of Object.entries(labels ?? {})) if (v !== undefined) out[k] = String(v);
  return out;
}

/** Seconds and dollars are fractions; every other atomic metric counts whole things. */
function valueTypeOf(name: string): ValueType {
  return /_(seconds|usd)(_total)?$/.test(name) ? ValueType.DOUBLE : ValueType.INT;
}

/** The UCUM unit the name ends in: seconds, tokens; none for the rest. */
function unitOf(name: string): string {
  if (/_seconds(_total)?$/.test(name)) return "s";
  if (/_tokens(_total)?$/.test(name)) return "{token}";
  return "";
}
