/**
 * The `/metrics` instruments pushed over OTLP/HTTP as well, by the process
 * that serves them (`atomic serve`, `atomic run --serve`), when the
 * standard OpenTelemetry variables say so:
 *
 * - on with OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT
 *   (or the config file's `telemetry.otlpEndpoint`), or
 *   OTEL_METRICS_EXPORTER=otlp (the SDK's default address then);
 * - off with OTEL_METRICS_EXPORTER=none (or only `prometheus`: `/metrics`
 *   is that exporter), OTEL_SDK_DISABLED=true, or nothing set; off, nothing
 *   of the OpenTelemetry SDK is loaded (./otlp-metrics-export.ts is
 *   imported on first use only);
 * - OTEL_EXPORTER_OTLP_METRICS_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL pick
 *   http/protobuf (the default) or http/json; OTEL_METRIC_EXPORT_INTERVAL
 *   and OTEL_METRIC_EXPORT_TIMEOUT (milliseconds) how often and how long.
 *
 * Bad settings are one warning on stderr and metrics stay off; the server
 * serves on. docs/design/observability.md says how the instruments map.
 */

import { readEnv, type EnvSource } from "../shared/config/environment.ts";
import type { TelemetryConfig } from "../shared/config/schema.ts";
import { applyTelemetryConfig, isHttpUrl, otlpHeadersProblem } from "../engine/tracing/tracing.ts";
import type { JournalMetrics } from "./metrics.ts";
// Types only: the module itself (and the SDK with it) is imported when metrics are on.
import type { OtlpMetricExport, OtlpMetricSettings } from "./otlp-metrics-export.ts";

const DEFAULT_INTERVAL_MS = 60_000;
const DEFAULT_TIMEOUT_MS = 30_000;

/** What the environment asks for: settings (on), undefined (off), or a warning (off, and why). */
export function otlpMetricSettings(env?: EnvSource): OtlpMetricSettings | { warning: string } | undefined {
  if (readEnv("OTEL_SDK_DISABLED", env)?.toLowerCase() === "true") return undefined;
  const exporters = (readEnv("OTEL_METRICS_EXPORTER", env) ?? "").split(",").map((e) => e.trim().toLowerCase()).filter(Boolean);
  if (exporters.includes("none")) return undefined;
  const unknown = exporters.filter((e) => e !== "otlp" && e !== "prometheus");
  if (unknown.length > 0) {
    return { warning: `OTEL_METRICS_EXPORTER=${unknown.join(",")} is not an exporter atomic has, so OTLP metrics are off (hint: use otlp, prometheus (the /metrics page) or none).` };
  }
  const endpoints = (["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"] as const).filter((n) => readEnv(n, env)?.trim());
  if (exporters.length > 0 && !exporters.includes("otlp")) return undefined;
  if (endpoints.length === 0 && !exporters.includes("otlp")) return undefined;
  for (const name of endpoints) {
    const value = readEnv(name, env)!.trim();
    if (!isHttpUrl(value)) return { warning: `${name} is not an http(s) URL (${JSON.stringify(value)}), so OTLP metrics are off (hint: e.g. http://localhost:4318).` };
  }
  const protocol = (readEnv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", env) ?? readEnv("OTEL_EXPORTER_OTLP_PROTOCOL", env) ?? "http/protobuf").trim();
  if (protocol !== "http/protobuf" && protocol !== "http/json") {
    return { warning: `OTLP protocol ${JSON.stringify(protocol)} is not supported, so OTLP metrics are off (hint: OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf or http/json).` };
  }
  const headers = otlpHeadersProblem(["OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"], "OTLP metrics", env);
  if (headers) return { warning: headers };
  const intervalMs = millis("OTEL_METRIC_EXPORT_INTERVAL", DEFAULT_INTERVAL_MS, env);
  if (typeof intervalMs === "string") return { warning: intervalMs };
  const timeoutMs = millis("OTEL_METRIC_EXPORT_TIMEOUT", DEFAULT_TIMEOUT_MS, env);
  if (typeof timeoutMs === "string") return { warning: timeoutMs };
  // The SDK's reader refuses a timeout longer than the interval.
  return { protocol, intervalMs, timeoutMs: Math.min(timeoutMs, intervalMs) };
}

/** A positive whole number of milliseconds from `name`, its default when unset, or the warning's text. */
function millis(name: "OTEL_METRIC_EXPORT_INTERVAL" | "OTEL_METRIC_EXPORT_TIMEOUT", dflt: number, env?: EnvSource): number | string {
  const text = readEnv(name, env)?.trim();
  if (!text) return dflt;
  const n = Number(text);
  if (/^\d+$/.test(text) && n > 0) return n;
  return `${name} must be a whole number of milliseconds above 0, got ${JSON.stringify(text.slice(0, 40))}, so OTLP metrics are off (hint: e.g. ${name}=${dflt}).`;
}

/**
 * Starts pushing `metrics` over OTLP when the environment (or `config`, the
 * config file's `telemetry`) asks for it; undefined when off.
 */
export async function startOtlpMetrics(metrics: JournalMetrics, config?: TelemetryConfig): Promise<OtlpMetricExport | undefined> {
  applyTelemetryConfig(config);
  const settings = otlpMetricSettings();
  if (!settings) return undefined;
  if ("warning" in settings) {
    process.stderr.write(`warning: ${settings.warning}\n`);
    return undefined;
  }
  const { exportMetrics } = await import("./otlp-metrics-export.ts");
  return exportMetrics(metrics, settings);
}
