/**
 * The OTLP header variables a CLI agent that exports its own spans needs
 * to reach a receiver that asks for an API key (Honeycomb, Grafana Cloud…).
 *
 * They are credentials: stageEnv (../stage-env.ts) keeps them from every
 * stage. An adapter whose CLI sends its spans to atomic's receiver (claude,
 * codex) adds them back, with traces on only, to the CLI's environment:
 * never to its command line, where `ps` shows them to every user of the
 * machine. Each CLI's OpenTelemetry exporter reads them itself (codex's
 * too, besides the endpoint codex gets by `-c`). Neither CLI's shell tool
 * inherits them: claude keeps its OTEL_* settings from its Bash, and codex
 * is told to (codex.ts). test/runners/claude-real and codex-real check
 * both against a receiver that requires a key.
 */

import { passThroughValue } from "../../shared/config/environment.ts";

const HEADER_VARIABLES = ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"] as const;

/** This process's OTLP trace headers, for the environment of a CLI whose stage has a TRACEPARENT; none when traces are off. */
export function otlpHeaderEnv(traceparent: string | undefined): Record<string, string> {
  if (!traceparent) return {};
  const env: Record<string, string> = {};
  for (const name of HEADER_VARIABLES) {
    const value = passThroughValue(name);
    if (value) env[name] = value;
  }
  return env;
}
