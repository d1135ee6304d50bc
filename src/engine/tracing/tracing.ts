/**
 * Whether traces are on, and the tracer when they are. Off unless the
 * standard OpenTelemetry variables ask for them (OTEL_EXPORTER_OTLP_ENDPOINT,
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_TRACES_EXPORTER=otlp), and
 * then nothing of the OpenTelemetry SDK is loaded: the tracer
 * (./otel-tracer.ts) is imported on first use only. Bad settings are one
 * warning on stderr, and traces stay off; the run goes on.
 *
 * The driver (engine/driver.ts) loads it once per process, tees the
 * engine's observer into it, and flushes it when a drive ends.
 */

import { readEnv, type EnvSource } from "../../shared/config/environment.ts";
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
  return { protocol, captureContent: readEnv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", env)?.toLowerCase() === "true" };
}

function isHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:";
  } catch {
    return false;
  }
}

let loading: Promise<Tracer | undefined> | undefined;

/** This process's tracer, or undefined when traces are off (the SDK is then never imported). */
export function loadTracer(): Promise<Tracer | undefined> {
  loading ??= (async () => {
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
