/**
 * Whether traces are on, and the tracer when they are. Off unless the
 * standard OpenTelemetry variables ask for them (OTEL_EXPORTER_OTLP_ENDPOINT,
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_TRACES_EXPORTER=otlp) or the
 * config file's `telemetry.otlpEndpoint` (the variables win), and
 * then nothing of the OpenTelemetry SDK is loaded: the tracer
 * (./otel-tracer.ts) is imported on first use only. Bad settings (an
 * endpoint that is no URL, an unknown protocol, headers that are no
 * name=value list) are one warning on stderr, and traces stay off; the run
 * goes on.
 *
 * The driver (engine/driver.ts) loads it once per process, tees the
 * engine's observer into it, and flushes it when a drive ends.
 */

import { readEnv, setEnv, type EnvSource, type VariableName } from "../../shared/config/environment.ts";
import type { TelemetryConfig } from "../../shared/config/schema.ts";
import type { TraceSettings, Tracer } from "./types.ts";

export type { Tracer } from "./types.ts";

/** What the environment asks for: settings (on), undefined (off), or a warning (off, and why). */
export function traceSettings(env?: EnvSource): TraceSettings | { warning: string } | undefined {
  if (readEnv("OTEL_SDK_DISABLED", env)?.toLowerCase() === "true") return undefined;
  const exporter = readEnv("OTEL_TRACES_EXPORTER", env)?.trim().toLowerCase();
  if (exporter === "none") return undefined;
  const endpoints = (["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"] as const).filter((n) => readEnv(n, env)?.trim());
  if (endpoints.length === 0 && exporter !== "otlp") return undefined;
  if (exporter !== undefined && exporter !== "otlp") {
    return { warning: `OTEL_TRACES_EXPORTER=${exporter} is not an exporter atomic has, so traces are off (hint: use otlp, or none).` };
  }
  for (const name of endpoints) {
    const value = readEnv(name, env)!.trim();
    if (!isHttpUrl(value)) return { warning: `${name} is not an http(s) URL (${JSON.stringify(value)}), so traces are off (hint: e.g. http://localhost:4318).` };
  }
  const protocol = (readEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env) ?? readEnv("OTEL_EXPORTER_OTLP_PROTOCOL", env) ?? "http/protobuf").trim();
  if (protocol !== "http/protobuf" && protocol !== "http/json") {
    return { warning: `OTLP protocol ${JSON.stringify(protocol)} is not supported, so traces are off (hint: OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf or http/json).` };
  }
  const headers = otlpHeadersProblem(["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"], "traces", env);
  if (headers) return { warning: headers };
  return { protocol, captureContent: readEnv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", env)?.toLowerCase() === "true" };
}

/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * Why an OTLP headers variable is not the `name=value,…` list the
 * OpenTelemetry spec asks for (values percent-encoded), or undefined when
 * each is. The SDK would drop a bad entry silently and send without it
 * (a receiver that needs its API key then refuses every batch), so a bad
 * list turns the export off with one warning instead. The warning names
 * the variable and the entry's place, never a value: these hold API keys.
 */
export function otlpHeadersProblem(names: readonly ("OTEL_EXPORTER_OTLP_HEADERS" | "OTEL_EXPORTER_OTLP_TRACES_HEADERS" | "OTEL_EXPORTER_OTLP_METRICS_HEADERS")[], what: string, env?: EnvSource): string | undefined {
  for (const name of names) {
    const entries = (readEnv(name, env) ?? "").split(",");
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i]!.trim();
      if (entry === "") continue;
      const eq = entry.indexOf("=");
      let why: string | undefined;
      if (eq < 0) why = 'has no "="';
      else if (!HEADER_NAME.test(entry.slice(0, eq).trim())) why = "does not start with a header name";
      else {
        try {
          decodeURIComponent(entry.slice(eq + 1).trim());
        } catch {
          why = "has a value that is not percent-encoded right";
        }
      }
      if (why) return `${name} is not a list of name=value pairs (its entry ${i + 1} ${why}), so ${what} are off (hint: e.g. ${name}="x-api-key=KEY,x-team=infra", with % , and spaces in a value written %25 %2C %20).`;
    }
  }
  return undefined;
}

/** Whether `text` is an http(s) URL (OTLP/HTTP endpoints). */
export function isHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:";
  } catch {
    return false;
  }
}

let loading: Promise<Tracer | undefined> | undefined;

/**
 * The config file's `telemetry` keys, as the OpenTelemetry variables they
 * stand for, each only where the variable is unset (the variables win):
 * the SDK's exporter reads its settings from the environment.
 */
export function applyTelemetryConfig(config: TelemetryConfig | undefined): void {
  if (!config) return;
  const pairs = (o: Record<string, string> | undefined) => (o ? Object.entries(o).map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join(",") : undefined);
  const values: [VariableName, string | undefined][] = [
    ["OTEL_EXPORTER_OTLP_ENDPOINT", readEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") ? undefined : config.otlpEndpoint],
    ["OTEL_EXPORTER_OTLP_PROTOCOL", config.protocol],
    ["OTEL_EXPORTER_OTLP_HEADERS", pairs(config.headers)],
    ["OTEL_SERVICE_NAME", config.serviceName],
    ["OTEL_RESOURCE_ATTRIBUTES", pairs(config.resourceAttributes)],
    ["OTEL_TRACES_SAMPLER", config.sampler],
    ["OTEL_TRACES_SAMPLER_ARG", config.samplerArg === undefined ? undefined : String(config.samplerArg)],
    ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", config.captureMessageContent === undefined ? undefined : String(config.captureMessageContent)],
  ];
  for (const [name, value] of values) if (value !== undefined && readEnv(name) === undefined) setEnv(name, value);
}

/** This process's tracer, or undefined when traces are off (the SDK is then never imported); `config`: the config file's `telemetry`. */
export function loadTracer(config?: TelemetryConfig): Promise<Tracer | undefined> {
  loading ??= (async () => {
    applyTelemetryConfig(config);
    const settings = traceSettings();
    if (!settings) return undefined;
    if ("warning" in settings) {
      process.stderr.write(`warning: ${settings.warning}\n`);
      return undefined;
    }
    const { OtelTracer } = await import("./otel-tracer.ts");
    return new OtelTracer(settings);
  })();
  return loading;
}
