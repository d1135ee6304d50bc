/**
 * Shared pieces of the observability tests: reading `/metrics` samples
 * with parse-prometheus-text-format (a maintained Prometheus text parser).
 * It reads OpenMetrics counters as a family named with `_total` (the
 * sample's name), which is the name the tests ask for. It folds a
 * histogram's series together without their labels, so histograms are
 * read from their `_count`, `_sum` and `_bucket` sample lines
 * (`histogramSamples`).
 */

import parse from "parse-prometheus-text-format";

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Every counter and gauge sample: one per family and label set. */
export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const family of parse(text)) {
    if (family.type === "HISTOGRAM" || family.type === "SUMMARY") continue;
    for (const m of family.metrics as { value: string; labels?: Record<string, string> }[]) samples.push({ name: family.name, labels: m.labels ?? {}, value: Number(m.value) });
  }
  return [...samples, ...histogramSamples(text)];
}

/** The `_count`, `_sum` and `_bucket` samples of histograms (name_count{labels} n), read from their lines. */
function histogramSamples(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = LINE.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    if (!/_(count|sum|bucket)$/.test(m[1]!)) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(LABEL)) labels[l[1]!] = l[2]!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

/** The sum of the samples named `name` whose labels include `match`. */
export function sum(samples: Sample[], name: string, match: Record<string, string>): number {
  let total = 0;
  for (const s of samples) {
    if (s.name !== name) continue;
    if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) total += s.value;
  }
  return total;
}
