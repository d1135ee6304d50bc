/**
 * The OpenTelemetry resource atomic's traces and metrics carry:
 * `service.name` "atomic" (OTEL_SERVICE_NAME wins), `service.version`, and
 * what OTEL_RESOURCE_ATTRIBUTES adds. Imported only when traces or OTLP
 * metrics are on.
 */

import type { Attributes } from "@opentelemetry/api";
import { detectResources, envDetector, resourceFromAttributes, type Resource } from "@opentelemetry/resources";
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from "@opentelemetry/semantic-conventions";
import { VERSION } from "../../shared/version.ts";

export function atomicResource(): Resource {
  const defaults: Attributes = { [ATTR_SERVICE_NAME]: "atomic", [ATTR_SERVICE_VERSION]: VERSION };
  return resourceFromAttributes(defaults).merge(detectResources({ detectors: [envDetector] }));
}
