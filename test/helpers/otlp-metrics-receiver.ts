/**
 * A local OTLP/HTTP metrics receiver for tests: real HTTP on 127.0.0.1
 * (Bun.serve on a free port) taking `POST /v1/metrics` in both encodings,
 * protobuf (read with the OpenTelemetry JS transformer's own protobuf
 * reader, walking the metrics service's message numbers, as
 * ./otlp-receiver.ts does for traces) and JSON (the OTLP JSON mapping).
 * Each request arrives as one `MetricExport` (its data points, attributes
 * as plain values) in `exports`, an `Arrivals` to wait on.
 */

import { Arrivals } from "./arrivals.ts";
import { fields, jsonAttributes, keyValue, serveOtlp, type JsonAny, type Reader } from "./otlp-receiver.ts";

export interface ReceivedPoint {
  metric: string;
  unit: string;
  kind: "sum" | "gauge" | "histogram";
  /** Sums: monotonic (a counter). */
  monotonic: boolean;
  /** 1 delta, 2 cumulative (sums and histograms). */
  temporality: number;
  attributes: Record<string, unknown>;
  /** Sums and gauges. */
  value: number;
  /** Histograms. */
  count: number;
  sum: number;
  bucketCounts: number[];
  bounds: number[];
}

export interface MetricExport {
  encoding: "protobuf" | "json";
  resource: Record<string, unknown>;
  points: ReceivedPoint[];
}

export interface OtlpMetricsReceiver {
  url: string;
  exports: Arrivals<MetricExport>;
  requests: number;
  close(): Promise<void>;
}

export async function startOtlpMetricsReceiver(): Promise<OtlpMetricsReceiver> {
  const exports = new Arrivals<MetricExport>();
  const endpoint = serveOtlp("/v1/metrics", exports, { json: fromJson, protobuf: fromProtobuf });
  return {
    url: endpoint.url,
    exports,
    get requests() {
      return endpoint.requests;
    },
    close: () => endpoint.close(),
  };
}

/** The sum of the points of `metric` whose attributes include `match` (their `value`, or `count` of histograms). */
export function total(e: MetricExport, metric: string, match: Record<string, string> = {}): number {
  return e.points
    .filter((p) => p.metric === metric && Object.entries(match).every(([k, v]) => p.attributes[k] === v))
    .reduce((a, p) => a + (p.kind === "histogram" ? p.count : p.value), 0);
}

// ---------------------------------------------------------------- protobuf (opentelemetry/proto/metrics/v1)

/** A fixed64 or double at the reader's position (little-endian), read as a number. */
function fixed(r: Reader, double: boolean): number {
  const view = new DataView(r._buf.buffer, r._buf.byteOffset + r.pos, 8);
  r.pos += 8;
  return double ? view.getFloat64(0, true) : Number(view.getBigInt64(0, true));
}

/** A repeated fixed64 or double field: packed (wire type 2) or one value (wire type 1). */
function repeated(r: Reader, wireType: number, double: boolean, into: number[]): void {
  if (wireType !== 2) {
    into.push(fixed(r, double));
    return;
  }
  const bytes = r.readBytes();
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i + 8 <= bytes.byteLength; i += 8) into.push(double ? view.getFloat64(i, true) : Number(view.getBigInt64(i, true)));
}

function blankPoint(metric: string, unit: string, kind: ReceivedPoint["kind"]): ReceivedPoint {
  return { metric, unit, kind, monotonic: false, temporality: 0, attributes: {}, value: 0, count: 0, sum: 0, bucketCounts: [], bounds: [] };
}

function fromProtobuf(body: Uint8Array): MetricExport[] {
  const out: MetricExport[] = [];
  fields(body, (n, _w, r) => {
    if (n !== 1) return;
    const e: MetricExport = { encoding: "protobuf", resource: {}, points: [] };
    const scopes: Uint8Array[] = [];
    fields(r.readBytes(), (m, _w2, r2) => {
      if (m === 1) fields(r2.readBytes(), (k, _w3, r3) => k === 1 && keyValue(r3.readBytes(), e.resource));
      else if (m === 2) scopes.push(r2.readBytes());
    });
    for (const scope of scopes) fields(scope, (m, _w2, r2) => m === 2 && e.points.push(...metricPoints(r2.readBytes())));
    out.push(e);
  });
  return out;
}

function metricPoints(buf: Uint8Array): ReceivedPoint[] {
  let name = "";
  let unit = "";
  const bodies: [ReceivedPoint["kind"], Uint8Array][] = [];
  fields(buf, (f, _w, r) => {
    if (f === 1) name = r.readString();
    else if (f === 3) unit = r.readString();
    else if (f === 5) bodies.push(["gauge", r.readBytes()]);
    else if (f === 7) bodies.push(["sum", r.readBytes()]);
    else if (f === 9) bodies.push(["histogram", r.readBytes()]);
  });
  const points: ReceivedPoint[] = [];
  for (const [kind, data] of bodies) {
    let temporality = 0;
    let monotonic = false;
    const raw: Uint8Array[] = [];
    fields(data, (f, _w, r) => {
      if (f === 1) raw.push(r.readBytes());
      else if (f === 2) temporality = r.readVarint();
      else if (f === 3) monotonic = r.readVarint() !== 0;
    });
    for (const p of raw) {
      const point = { ...blankPoint(name, unit, kind), temporality, monotonic };
      fields(p, (f, w, r) => {
        if (kind === "histogram") {
          if (f === 9) keyValue(r.readBytes(), point.attributes);
          else if (f === 4) point.count = fixed(r, false);
          else if (f === 5) point.sum = fixed(r, true);
          else if (f === 6) repeated(r, w, false, point.bucketCounts);
          else if (f === 7) repeated(r, w, true, point.bounds);
        } else if (f === 7) keyValue(r.readBytes(), point.attributes);
        else if (f === 4) point.value = fixed(r, true);
        else if (f === 6) point.value = fixed(r, false);
      });
      points.push(point);
    }
  }
  return points;
}

// ---------------------------------------------------------------- JSON

type JsonPoint = {
  attributes?: { key: string; value: JsonAny }[];
  asInt?: string | number;
  asDouble?: number;
  count?: string | number;
  sum?: number;
  bucketCounts?: (string | number)[];
  explicitBounds?: number[];
};

type JsonData = { dataPoints?: JsonPoint[]; aggregationTemporality?: number; isMonotonic?: boolean };

function fromJson(body: any): MetricExport[] {
  return (body.resourceMetrics ?? []).map((rm: any) => {
    const e: MetricExport = { encoding: "json", resource: jsonAttributes(rm.resource?.attributes), points: [] };
    for (const sm of rm.scopeMetrics ?? []) {
      for (const m of sm.metrics ?? []) {
        for (const kind of ["sum", "gauge", "histogram"] as const) {
          const data = m[kind] as JsonData | undefined;
          if (!data) continue;
          for (const p of data.dataPoints ?? []) {
            e.points.push({
              ...blankPoint(m.name, m.unit ?? "", kind),
              temporality: data.aggregationTemporality ?? 0,
              monotonic: data.isMonotonic ?? false,
              attributes: jsonAttributes(p.attributes),
              value: p.asDouble ?? Number(p.asInt ?? 0),
              count: Number(p.count ?? 0),
              sum: p.sum ?? 0,
              bucketCounts: (p.bucketCounts ?? []).map(Number),
              bounds: p.explicitBounds ?? [],
            });
          }
        }
      }
    }
    return e;
  });
}
