/**
 * The config file, key by key: one valibot schema in which every key
 * carries its type, default, unit and description (valibot's
 * `description` and `metadata` pipes). The loader (load.ts) checks each
 * file against it, and docs/reference/config.md is generated from it
 * (`describeConfig`). Code that needs a key's default takes it from
 * CONFIG_DEFAULTS, never from a constant of its own.
 *
 * Every key is optional; unknown keys are ignored, so a newer config works
 * with an older atomic. A key's `type` text is also what a bad value is
 * told it must be: `"openai.maxRetries" in ~/.atomic/config.json must be a
 * number, at least 0`.
 */

import { isAbsolute } from "node:path";
import * as v from "valibot";
import { AGE_EXAMPLES, parseAge } from "../age.ts";
import { checkSandboxOption, type SandboxOption } from "../sandbox-option.ts";

/** The artifact store's chunk (artifacts/store.ts CHUNK_BYTES), the smallest per-file cap: shared/ imports nothing above it. */
const CHUNK_BYTES = 256 * 1024;

/** The finished statuses retention may delete: never a run that could still continue. */
export const RETENTION_STATUSES = ["completed", "cancelled", "failed", "skipped"] as const;

export const CONFIG_DEFAULTS = {
  runner: "openai",
  openai: {
    baseUrl: "https://api.openai.com/v1",
    maxRetries: 4,
    maxBackoffMs: 30_000,
    /** Five minutes: a long completion of a slow local model still ends. */
    requestTimeoutMs: 300_000,
  },
  admission: {
    maxSessionsPerRun: 4,
    maxSessionsPerUser: 8,
    maxLoadPerCpu: 3,
    minFreeMemoryMb: 256,
    paceMs: 1_000,
  },
  budget: { warnAtPercent: 80 },
  retention: { status: RETENTION_STATUSES },
  /** A runaway stage cannot fill the database, and 64 MiB of a log's tail is plenty. */
  artifacts: { maxFileBytes: 64 * 1024 * 1024, maxAttachmentBytes: 10 * 1024 * 1024 },
  timeouts: { brokerStartMs: 30_000, workerStartMs: 30_000 },
  maxChildDepth: 3,
} as const;

/** The bounds of the start timeouts and of maxChildDepth: a value outside them is refused when the config is read. */
export const START_TIMEOUT_RANGE = { min: 1_000, max: 600_000 } as const;
export const MAX_CHILD_DEPTH_LIMIT = 10;

/** What the reference page and the loader's messages say of a key. */
export interface KeyInfo {
  /** What a value must be, as the end of "must be …": "a number, at least 0". */
  type: string;
  description: string;
  unit?: string;
  /** The default, as shown to people (a value, or a sentence when it depends on something). */
  default?: string;
  /** Where to read more, for the hint of a bad value. */
  hint?: string;
}

/** An optional key: `schema` with its type as the message of every issue in it, and its KeyInfo. */
function key<S extends v.GenericSchema>(schema: S, info: KeyInfo) {
  return v.optional(v.pipe(v.message(schema, info.type), v.description(info.description), v.metadata({ ...info })));
}

const text = () => v.string();
/** A JSON object (valibot's object and record take an array for one). */
const isPlainObject = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);
const object = <E extends v.ObjectEntries>(entries: E) => v.pipe(v.custom<Record<string, unknown>>(isPlainObject), v.object(entries));
const record = <S extends v.GenericSchema>(entry: S) => v.pipe(v.custom<Record<string, unknown>>(isPlainObject), v.record(v.string(), entry));
const atLeast = (min: number) => v.pipe(v.number(), v.finite(), v.minValue(min));
const NUMBER = "a number, at least 0";
const ms = (description: string, dflt?: number) => key(atLeast(0), { type: NUMBER, unit: "milliseconds", description, ...(dflt !== undefined ? { default: String(dflt) } : {}) });
const perMTok = (what: string) => key(atLeast(0), { type: NUMBER, unit: "USD per million tokens", description: `Price of ${what}.` });
const ARTIFACTS_HINT = 'see "artifacts" in docs/reference/config.md';
const D = CONFIG_DEFAULTS;

const OpenAiSchema = object({
  baseUrl: key(text(), { type: "a string", default: D.openai.baseUrl, description: "Base URL of the OpenAI-compatible endpoint (ATOMIC_OPENAI_BASE_URL overrides it). Its key: OPENAI_API_KEY." }),
  maxRetries: key(atLeast(0), { type: NUMBER, unit: "retries", default: String(D.openai.maxRetries), description: "Retries of a request on 429, 5xx and network errors." }),
  maxBackoffMs: ms("Longest wait between retries, Retry-After included.", D.openai.maxBackoffMs),
  requestTimeoutMs: ms("Timeout of one request.", D.openai.requestTimeoutMs),
});

const CliRunnerSchema = object({
  path: key(text(), { type: "a string", default: "the runner's program on PATH", description: "The agent CLI's binary: a path, or a name looked up on PATH." }),
  args: key(v.array(v.string()), { type: "an array of strings", description: "Extra arguments added to every invocation." }),
});

const ModelPriceSchema = object({
  inputPerMTok: perMTok("input tokens"),
  outputPerMTok: perMTok("output tokens"),
  cacheReadPerMTok: perMTok("input tokens read from the cache"),
  cacheWritePerMTok: perMTok("input tokens written to the cache"),
});

const AdmissionSchema = object({
  maxSessionsPerRun: key(atLeast(0), { type: NUMBER, unit: "sessions", default: String(D.admission.maxSessionsPerRun), description: "Concurrent agent sessions of one run tree (at least 1 is always allowed)." }),
  maxSessionsPerUser: key(atLeast(0), {
    type: NUMBER,
    unit: "sessions",
    default: String(D.admission.maxSessionsPerUser),
    description: "Concurrent agent sessions of this user across all runs on the host (at least 1 is always allowed).",
  }),
  maxLoadPerCpu: key(atLeast(0), { type: NUMBER, unit: "load per CPU", default: String(D.admission.maxLoadPerCpu), description: "Stage starts are paced while the 1-minute load average per CPU is above this." }),
  minFreeMemoryMb: key(atLeast(0), { type: NUMBER, unit: "MB", default: String(D.admission.minFreeMemoryMb), description: "Stage starts are paced while free memory is below this." }),
  paceMs: ms("Spacing of stage starts under pressure.", D.admission.paceMs),
  slotsDir: key(text(), { type: "a string", default: "agent-slots in the runtime directory ($XDG_RUNTIME_DIR/atomic, else $ATOMIC_HOME/run)", description: "Where the per-user session slots live." }),
});

const BudgetSchema = object({
  maxCostUsd: key(atLeast(0), { type: NUMBER, unit: "USD", default: "no limit", description: "A run stops once its stages cost this much." }),
  maxTokens: key(atLeast(0), { type: NUMBER, unit: "tokens", default: "no limit", description: "A run stops once its stages used this many tokens." }),
  maxDurationMs: ms("A run stops once it ran this long."),
  warnAtPercent: key(atLeast(0), { type: NUMBER, unit: "percent", default: String(D.budget.warnAtPercent), description: "Warn once when this share of any limit is used." }),
});

const RetentionSchema = object({
  olderThan: key(
    v.pipe(
      v.string(),
      v.check((s) => parseAge(s) !== undefined),
    ),
    { type: `an age like ${AGE_EXAMPLES}`, default: "nothing is deleted", description: "The service deletes, daily, finished runs that ended longer ago than this." },
  ),
  status: key(v.array(v.picklist(RETENTION_STATUSES)), {
    type: `an array of ${RETENTION_STATUSES.join(", ")}`,
    default: JSON.stringify(D.retention.status),
    description: "Which finished statuses retention deletes (only these: never a run that could still continue).",
  }),
});

const ArtifactsSchema = object({
  dir: key(
    v.pipe(
      v.string(),
      v.check((s) => isAbsolute(s)),
    ),
    {
      type: "an absolute path (a directory every host mounts)",
      default: "a Postgres journal keeps them in its database; an SQLite journal in $ATOMIC_HOME/artifacts",
      description: "Where stage files go so that every host of a shared journal reads them (any journal).",
      hint: ARTIFACTS_HINT,
    },
  ),
  maxFileBytes: key(v.pipe(v.number(), v.integer(), v.minValue(CHUNK_BYTES)), {
    type: `a whole number of bytes, at least ${CHUNK_BYTES}`,
    unit: "bytes",
    default: String(D.artifacts.maxFileBytes),
    description: "Cap of each stage file: past it the head is dropped and the tail kept.",
    hint: ARTIFACTS_HINT,
  }),
  maxAttachmentBytes: key(v.pipe(v.number(), v.integer(), v.minValue(1)), {
    type: "a whole number of bytes, at least 1",
    unit: "bytes",
    default: String(D.artifacts.maxAttachmentBytes),
    description: "Cap of each file attached to a message (`atomic send … --attach FILE`); a larger one is refused.",
  }),
});

const startTimeout = (description: string, dflt: number) =>
  key(v.pipe(v.number(), v.integer(), v.minValue(START_TIMEOUT_RANGE.min), v.maxValue(START_TIMEOUT_RANGE.max)), {
    type: `a whole number from ${START_TIMEOUT_RANGE.min} to ${START_TIMEOUT_RANGE.max}`,
    unit: "milliseconds",
    default: String(dflt),
    description,
  });
const TimeoutsSchema = object({
  brokerStartMs: startTimeout("How long a command that needs the intercom broker (send, answer, sessions, the status page's actions) waits for one it started to answer.", D.timeouts.brokerStartMs),
  workerStartMs: startTimeout("How long a starting worker process (a run's pool or `atomic worker`) gets to say it is ready before it is killed and started again (three failures in a row fail the pool: worker_startup_failed).", D.timeouts.workerStartMs),
});

const ServiceSchema = object({
  workflowDirs: key(v.array(v.pipe(v.string(), v.nonEmpty())), {
    type: "an array of directory paths",
    default: "none: no path is accepted",
    description: "Directories under which `POST /api/runs` and schedules may name a workflow file by path (relative entries are taken from the service's directory).",
  }),
});

const TELEMETRY_HINT = 'see "Traces" in docs/guides/observability.md';
const TelemetrySchema = object({
  otlpEndpoint: key(
    v.pipe(
      v.string(),
      v.check((s) => /^https?:\/\/./.test(s)),
    ),
    { type: "an http(s) URL", default: "none: traces are off", description: "OTLP/HTTP base URL traces go to (`/v1/traces` is added), and the status server's metrics (`/v1/metrics`); set, both are on. OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT win over it.", hint: TELEMETRY_HINT },
  ),
  protocol: key(v.picklist(["http/protobuf", "http/json"]), { type: '"http/protobuf" or "http/json"', default: "http/protobuf", description: "The OTLP encoding (OTEL_EXPORTER_OTLP_PROTOCOL wins).", hint: TELEMETRY_HINT }),
  headers: key(record(v.string()), { type: "an object of strings", description: "Headers of every OTLP request, e.g. an API key (OTEL_EXPORTER_OTLP_HEADERS wins; better kept there than in a file).", hint: TELEMETRY_HINT }),
  serviceName: key(text(), { type: "a string", default: "atomic", description: "`service.name` of the traces (OTEL_SERVICE_NAME wins)." }),
  resourceAttributes: key(record(v.string()), { type: "an object of strings", description: "More resource attributes of the traces (OTEL_RESOURCE_ATTRIBUTES wins)." }),
  sampler: key(v.picklist(["always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"]), {
    type: "a sampler name (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)",
    default: "parentbased_always_on",
    description: "Which traces are kept (OTEL_TRACES_SAMPLER wins).",
  }),
  samplerArg: key(v.pipe(v.number(), v.minValue(0), v.maxValue(1)), { type: "a number from 0 to 1", default: "1", description: "The ratio of the traceidratio samplers (OTEL_TRACES_SAMPLER_ARG wins)." }),
  captureMessageContent: key(v.boolean(), { type: "true or false", default: "false", description: "Stage prompts and questions go into the spans (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT wins)." }),
});

const section = <S extends v.GenericSchema>(schema: S, description: string, hint?: string) => key(schema, { type: "an object", description, ...(hint ? { hint } : {}) });
const byName = <S extends v.GenericSchema>(entry: S, name: string, description: string) =>
  key(record(v.message(entry, "an object")), { type: "an object", description: `${description} (keys: ${name}).` });

export const ConfigSchema = v.message(
  object({
    runner: key(text(), { type: "a string", default: D.runner, description: "Default runner of prompt stages: openai, claude, codex, gemini, opencode or pi (ATOMIC_RUNNER overrides it)." }),
    model: key(text(), { type: "a string", default: "none: a stage or workflow must name one", description: "Default model (ATOMIC_MODEL overrides it)." }),
    openai: section(OpenAiSchema, "The openai runner."),
    runners: byName(CliRunnerSchema, "claude, codex, gemini, opencode, pi", "Agent CLIs by runner name"),
    pricing: byName(ModelPriceSchema, "a model name, or a prefix: the longest matching prefix prices a model", "Prices by model"),
    admission: section(AdmissionSchema, "When a stage may start, beyond its run's own concurrency."),
    budget: section(BudgetSchema, "Default limits of every run (a workflow's and a command's own limits win)."),
    retention: section(RetentionSchema, "What the service deletes daily; absent, nothing is."),
    artifacts: section(ArtifactsSchema, "Where stage files go, and their cap.", ARTIFACTS_HINT),
    service: section(ServiceSchema, "The local service (`atomic serve`)."),
    timeouts: section(TimeoutsSchema, "How long starting processes are waited for."),
    maxChildDepth: key(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(MAX_CHILD_DEPTH_LIMIT)), {
      type: `a whole number from 1 to ${MAX_CHILD_DEPTH_LIMIT}`,
      unit: "levels",
      default: String(D.maxChildDepth),
      description: "How deep child runs (`ctx.workflow`) may nest below the root; a deeper one fails its step (child_depth).",
    }),
    telemetry: section(TelemetrySchema, "OpenTelemetry traces over OTLP/HTTP; the standard OTEL_* variables win over each key.", TELEMETRY_HINT),
    secretVariables: key(v.array(v.pipe(v.string(), v.nonEmpty())), {
      type: "an array of variable names",
      default: "none beyond the names holding KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL",
      description: "More environment variables a run never records (docs/guides/changing-workflows.md): a resumed run takes them from its own environment.",
    }),
    sandbox: key(
      v.custom<SandboxOption>((x) => checkSandboxOption(x, "sandbox") === undefined),
      {
        type: '"off", true, or an object with network ("none", "provider" or "open"), read and write (arrays of paths, absolute or ~/…) and hosts (an array of host:port)',
        default: "none set: agent stages sandboxed (network provider), shell stages not",
        description: 'Sandbox of every stage that names none itself, nor its workflow (shell stages too; "off" turns the agent stages\' default off): see docs/guides/sandboxing.md.',
      },
    ),
  }),
  "a JSON object",
);

export type AtomicConfig = v.InferOutput<typeof ConfigSchema>;
export type ModelPrice = NonNullable<v.InferOutput<typeof ModelPriceSchema>>;
export type CliRunnerConfig = v.InferOutput<typeof CliRunnerSchema>;
export type AdmissionConfig = v.InferOutput<typeof AdmissionSchema>;
export type BudgetConfig = v.InferOutput<typeof BudgetSchema>;
export type RetentionConfig = v.InferOutput<typeof RetentionSchema>;
export type ArtifactsConfig = v.InferOutput<typeof ArtifactsSchema>;
export type TelemetryConfig = v.InferOutput<typeof TelemetrySchema>;

/** One documented key: its dotted path (`<name>` for a key of the user's choosing) and what the schema says of it. */
export interface DescribedKey extends KeyInfo {
  path: string;
}

/** Every key of the schema, depth first, as the reference page lists them. */
export function describeConfig(): DescribedKey[] {
  const out: DescribedKey[] = [];
  walk(ConfigSchema as unknown as v.GenericSchema, "", out);
  return out;
}

/** The KeyInfo of the key at `path` (["openai", "maxRetries"]; record keys may be anything), or undefined. */
export function keyInfoAt(path: readonly string[]): KeyInfo | undefined {
  let schema: v.GenericSchema | undefined = ConfigSchema as unknown as v.GenericSchema;
  let info: KeyInfo | undefined;
  for (const part of path) {
    const inner = structureOf(schema);
    schema = inner?.entries ? inner.entries[part] : inner?.value;
    if (!schema) return info;
    info = infoOf(schema) ?? info;
  }
  return info;
}

function walk(schema: v.GenericSchema, prefix: string, out: DescribedKey[]): void {
  const inner = structureOf(schema);
  if (inner?.value) return walk(inner.value, `${prefix}.<name>`, out);
  for (const [name, entry] of Object.entries(inner?.entries ?? {})) {
    const path = prefix ? `${prefix}.${name}` : name;
    const info = infoOf(entry);
    if (info) out.push({ path, ...info });
    walk(entry, path, out);
  }
}

/** The KeyInfo an optional key carries in its pipe. */
function infoOf(schema: v.GenericSchema): KeyInfo | undefined {
  const wrapped = (schema as { wrapped?: v.GenericSchema }).wrapped ?? schema;
  const meta = v.getMetadata(wrapped as Parameters<typeof v.getMetadata>[0]) as Partial<KeyInfo>;
  return meta.type && meta.description ? (meta as KeyInfo) : undefined;
}

interface Structure {
  type: string;
  entries?: Record<string, v.GenericSchema>;
  value?: v.GenericSchema;
  wrapped?: v.GenericSchema;
  pipe?: readonly { kind: string }[];
}

/** The object (its entries) or record (its value) under a key's optional, message and pipes; undefined for a leaf. */
function structureOf(schema: v.GenericSchema | undefined): Structure | undefined {
  const s = schema as unknown as Structure | undefined;
  if (!s) return undefined;
  if (s.entries || (s.type === "record" && s.value)) return s;
  if (s.wrapped) return structureOf(s.wrapped);
  for (const item of s.pipe ?? []) {
    if (item === (s as unknown) || item.kind !== "schema") continue;
    const found = structureOf(item as unknown as v.GenericSchema);
    if (found) return found;
  }
  return undefined;
}

/** The price of `model`: an exact entry, else the longest configured prefix ("gpt-4o" prices "gpt-4o-2024-08-06"). */
export function priceOf(pricing: Record<string, ModelPrice> | undefined, model: string | undefined): ModelPrice | undefined {
  if (!pricing || !model) return undefined;
  if (pricing[model]) return pricing[model];
  let best: string | undefined;
  for (const key of Object.keys(pricing)) if (model.startsWith(key) && (!best || key.length > best.length)) best = key;
  return best ? pricing[best] : undefined;
}
