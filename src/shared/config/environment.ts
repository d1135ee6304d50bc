/**
 * Every environment variable atomic reads or sets, in one registry, and
 * the only code that touches `process.env` (a test scans src/ for any
 * other: test/shared/environment.test.ts). The reference page
 * docs/reference/environment.md is generated from this list.
 *
 * Each variable has an audience:
 *
 *   user        a setting of atomic's, documented (most have a flag or a
 *               config key beside them)
 *   stage       set by atomic for a stage's processes to read
 *   credential  a key or password: read by atomic or by the agent CLIs it
 *               drives, kept from stages unless a stage names it
 *               (runners/stage-env.ts), its value redacted (shared/secrets.ts)
 *   external    a variable of the system or of another program that atomic
 *               reads too (HOME, XDG_*, NO_COLOR, PG*, an agent CLI's own)
 *   internal    a hand-off between atomic's own processes; never set it
 *   testing     a hook for atomic's tests, benchmarks and debugging
 *
 * Reads go through `readEnv(name)` (parsed, with the registry's default),
 * which takes another environment for tests (`readEnv(name, { … })`);
 * writes through `setEnv` and `takeEnv`. A child process gets this
 * process's environment through `childEnv` (with changes), so everything
 * not named here passes through as it is: atomic's roles inherit the whole
 * environment, stages all but what `keptFromStages` marks. The one read of
 * a name not listed here is `passThroughValue`: a stage's `env: { NAME:
 * true }` asks for this process's own value of a variable it names.
 *
 * A value that does not parse (ATOMIC_HOST_LOST_MS=soon) counts as unset:
 * these are read in processes that have no terminal to complain to. The
 * exceptions are checked by every command before it does anything
 * (cli/globals.ts), so no process of atomic's ever reads a bad one:
 * ATOMIC_DURABILITY, with its flag, and the variables with a `valid` test
 * (`invalidEnv`): ATOMIC_JOURNAL_RETRY_MS and ATOMIC_HOST_LOST_MS, the
 * user-facing durations.
 */

export type Audience = "user" | "stage" | "credential" | "external" | "internal" | "testing";

/** An environment to read: process.env, or a test's own. */
export type EnvSource = Readonly<Record<string, string | undefined>>;

export interface Variable<T> {
  audience: Audience;
  /** What the value is, for people: "path", "URL", "milliseconds". */
  type: string;
  /** What holds when it is unset, for people (the parsed default is `parse(undefined)`). */
  default?: string;
  description: string;
  /** Kept from stages unless a stage names it (credentials, atomic's internal configuration). */
  keptFromStages?: boolean;
  parse(raw: string | undefined): T;
  /**
   * The values a command accepts (`invalidEnv`): `test` for a value that is set (not blank), `what` saying which
   * they are ("a whole number of …"), `example` one of them. Absent: any value, a bad one counts as unset.
   */
  valid?: { test(raw: string): boolean; what: string; example: string };
}

/** Any text; an empty value is unset. */
const text = (raw: string | undefined): string | undefined => raw || undefined;
/** Text with surrounding blanks removed; blank is unset. */
const trimmed = (raw: string | undefined): string | undefined => raw?.trim() || undefined;
/** A positive number of milliseconds, else `fallback`. */
const positiveMs =
  (fallback: number) =>
  (raw: string | undefined): number => {
    const n = Number(raw);
    return raw && Number.isFinite(n) && n > 0 ? n : fallback;
  };
/** A whole number of milliseconds from `min` to `max` (blanks around it allowed), else undefined. */
const wholeMs = (raw: string | undefined, min: number, max: number): number | undefined => {
  const n = raw !== undefined && /^\s*\d+\s*$/.test(raw) ? Number(raw) : NaN;
  return n >= min && n <= max ? n : undefined;
};
/** A user's duration setting as every command checks it (`invalidEnv`): whole milliseconds from `min` (`minWhy` says why) to a day. */
const wholeMsSetting = (min: number, minWhy: string, dflt: number): NonNullable<Variable<number>["valid"]> => ({
  test: (raw) => wholeMs(raw, min, DAY_MS) !== undefined,
  what: `a whole number of milliseconds from ${min}${minWhy} to ${DAY_MS} (a day)`,
  example: `${dflt} (the default)`,
});
const isOne = (raw: string | undefined): boolean => raw === "1";

function variable<T>(v: Variable<T>): Variable<T> {
  return v;
}

const credential = (description: string) => variable({ audience: "credential", type: "secret", description, keptFromStages: true, parse: text });
const external = (type: string, description: string, dflt?: string) => variable({ audience: "external", type, description, ...(dflt ? { default: dflt } : {}), parse: text });
const stage = (description: string) => variable({ audience: "stage", type: "text", description, parse: text });

/**
 * Tuning constants that a variable overrides live here with their reason,
 * next to the variable that overrides them.
 */
/** Postgres writes retry this long after the connection was lost: less than a run's lease (30 s), so a run whose database stays away stops with storage_unavailable before its lease keeper gives up on it. */
export const JOURNAL_RETRY_MS = 15_000;
/**
 * ATOMIC_JOURNAL_RETRY_MS at most: a day (the longest lease a worker host takes, `--work-lease-ms`). A window
 * longer than that is a unit or a few zeros too many, not a choice: a run would wait it out, silent, before
 * saying that its database is gone.
 */
export const JOURNAL_RETRY_MAX_MS = 86_400_000;
/** The longest duration a user's setting takes (ATOMIC_JOURNAL_RETRY_MS, ATOMIC_HOST_LOST_MS). */
const DAY_MS = JOURNAL_RETRY_MAX_MS;
/** A host silent for longer than this (and not stopped) is shown lost: ten missed heartbeats of one second. */
export const HOST_LOST_AFTER_MS = 10_000;
/**
 * ATOMIC_HOST_LOST_MS at least: two heartbeats of a host (one second each). Below that a live host's
 * silence between two heartbeats would show it lost, and `atomic attach` would say it is gone.
 */
export const HOST_LOST_MIN_MS = 2_000;
/** A worker's heartbeat to its coordinator, unless the coordinator hands it another. */
export const WORKER_HEARTBEAT_MS = 1_000;
/** The lease of a work item on a worker, unless the coordinator hands it another: a worker silent this long is presumed lost. */
export const WORK_LEASE_MS = 30_000;
/** An intercom broker no process uses goes away after this: a run that starts soon after reuses it, an idle host keeps no process. */
export const BROKER_IDLE_MS = 5_000;

export const VARIABLES = {
  // --- user-facing settings ---
  ATOMIC_HOME: variable({
    audience: "user",
    type: "path",
    default: "~/.atomic",
    description: "Where atomic keeps its journal, artifacts, logs and config.json (`--home`). An empty value is unset.",
    parse: text,
  }),
  ATOMIC_JOURNAL: variable({
    audience: "user",
    type: "URL",
    default: "the SQLite journal in the home",
    description:
      "A shared Postgres journal, `postgres://user@host:5432/db?schema=atomic` (`--journal`). Treated as a credential: it may carry a password, so stages do not see it and its password is redacted.",
    keptFromStages: true,
    parse: text,
  }),
  ATOMIC_CONFIG: variable({
    audience: "user",
    type: "path",
    description: "One more config file, read after `$ATOMIC_HOME/config.json` and the project's `.atomic/config.json` (its keys win): settings for one shell or one CI job. It must exist.",
    parse: text,
  }),
  ATOMIC_RUNNER: variable({ audience: "user", type: "runner name", default: "openai", description: "Default runner of prompt stages; overrides `runner` of the config files.", parse: text }),
  ATOMIC_MODEL: variable({ audience: "user", type: "model name", description: "Default model; overrides `model` of the config files.", parse: text }),
  ATOMIC_OPENAI_BASE_URL: variable({
    audience: "user",
    type: "URL",
    default: "https://api.openai.com/v1",
    description: "Base URL of the OpenAI-compatible endpoint of the openai runner; overrides `openai.baseUrl` of the config files.",
    parse: text,
  }),
  ATOMIC_DURABILITY: variable({
    audience: "user",
    type: "full | normal",
    default: "full",
    description: "`--durability`: `full`, a recorded step survives power loss; `normal`, faster, may lose the last steps on power loss (SQLite journal).",
    parse: text,
  }),
  ATOMIC_VERBOSE: variable({ audience: "user", type: "1", description: "`1`: as `--verbose` (stack traces and debug detail).", parse: isOne }),
  ATOMIC_HOST_ID: variable({
    audience: "user",
    type: "text",
    default: "machine id + boot id + pid namespace",
    description: "This host's identity in leases (`--host-id`), for machines that share all three (network namespaces). The CLI sets it from `--host-id` for the processes it starts.",
    parse: trimmed,
  }),
  ATOMIC_CHROMIUM: variable({
    audience: "user",
    type: "program",
    default: "the first of chromium, chromium-browser, google-chrome, google-chrome-stable on PATH",
    description: "The browser the builtin `design` workflow takes screenshots with (its `chromium` input wins).",
    parse: text,
  }),
  ATOMIC_JOURNAL_RETRY_MS: variable({
    audience: "user",
    type: "milliseconds",
    default: String(JOURNAL_RETRY_MS),
    description: `How long a Postgres journal's statements retry after the connection was lost, counted from the first loss of the outage for every statement of the process, before the run stops (resumably) with storage_unavailable. A whole number from 1 to ${JOURNAL_RETRY_MAX_MS} (a day); any other value is refused by every command. Keep it below the run lease (30 s).`,
    parse: (raw) => wholeMs(raw, 1, JOURNAL_RETRY_MAX_MS) ?? JOURNAL_RETRY_MS,
    valid: wholeMsSetting(1, "", JOURNAL_RETRY_MS),
  }),
  ATOMIC_HOST_LOST_MS: variable({
    audience: "user",
    type: "milliseconds",
    default: String(HOST_LOST_AFTER_MS),
    description: `A worker host silent for longer than this is shown lost (\`atomic workers\`, \`atomic show\`, \`atomic attach\`): for a fleet whose heartbeats are known to lag. A whole number from ${HOST_LOST_MIN_MS} (two heartbeats) to ${JOURNAL_RETRY_MAX_MS} (a day); every command refuses another value before it does anything.`,
    parse: (raw) => Math.max(HOST_LOST_MIN_MS, positiveMs(HOST_LOST_AFTER_MS)(raw)),
    valid: wholeMsSetting(HOST_LOST_MIN_MS, " (two heartbeats)", HOST_LOST_AFTER_MS),
  }),

  // --- set for stages ---
  ATOMIC_RUN_ID: stage("The id of the run the stage belongs to."),
  ATOMIC_STAGE: stage("The stage's name."),
  ATOMIC_STAGE_KEY: stage("The stage's key in its run (unique within the run)."),
  ATOMIC_ATTEMPT: stage("The attempt number of this run of the stage (1, then 2 on a retry)."),
  ATOMIC_QA_DIR: stage("For the end-to-end check of the builtin `ralph` (its `qa_command`): the folder where the check saves its screenshots, one PNG per step; they go to the pull request as QA evidence."),
  TRACEPARENT: stage("With traces on: the W3C trace context of the stage attempt's span, so the stage's own OpenTelemetry spans (an agent CLI's) nest under it."),

  // --- credentials ---
  OPENAI_API_KEY: credential("The key of the OpenAI-compatible endpoint (the openai runner, `atomic doctor --check-endpoint`; codex, opencode and pi read it too). Unset for a local endpoint."),
  ATOMIC_OPENAI_API_KEY: credential("Not read by this version; kept from stages should it be set."),
  ANTHROPIC_API_KEY: credential("Read by the claude, opencode and pi CLIs; passed to them, kept from other stages."),
  ANTHROPIC_AUTH_TOKEN: credential("Read by the claude CLI; passed to it, kept from other stages."),
  GEMINI_API_KEY: credential("Read by the gemini, opencode and pi CLIs; passed to them, kept from other stages."),
  GOOGLE_API_KEY: credential("Read by the gemini CLI; passed to it, kept from other stages."),
  OPENROUTER_API_KEY: credential("Read by the opencode and pi CLIs; passed to them, kept from other stages."),
  CODEX_API_KEY: credential("Read by the codex CLI; passed to it, kept from other stages."),
  PGPASSWORD: credential("The Postgres journal's password when its URL has none (read by the Postgres driver; `~/.pgpass` works too)."),
  ATOMIC_STATUS_TOKEN: credential("Not read by this version (the token lives in `$ATOMIC_HOME/status-token`); kept from stages should it be set."),

  // --- read from the system and from other programs ---
  HOME: external("path", "The user's home: where the agent CLIs keep their settings (`atomic doctor`).", "the account's home"),
  PATH: external("path list", "Where runners' programs are found (`runners.<name>.path` names one directly); the process group guard gets only this."),
  XDG_RUNTIME_DIR: external("path", "The user's runtime directory: `$XDG_RUNTIME_DIR/atomic` holds agent session slots and long socket paths when it is an absolute 0700 directory of the user's.", "`$ATOMIC_HOME/run`"),
  XDG_CONFIG_HOME: external("path", "Where opencode's settings are looked for (`atomic doctor`).", "~/.config"),
  XDG_CACHE_HOME: external("path", "`$XDG_CACHE_HOME/atomic` holds the TypeScript compiler `atomic check` unpacks from the binary on first use.", "~/.cache"),
  NO_COLOR: external("any", "Set and not empty: no colours, as `--no-color`."),
  FORCE_COLOR: external("0 to 3", "Read by the terminal UI library of `atomic tui` and of questions answered in `atomic run`; atomic sets it to 0 there when colours are off (`NO_COLOR`, `--no-color`)."),
  TERM: external("text", "`dumb`: no colours and no live views (`atomic run`, `atomic runs --watch`)."),
  COLUMNS: external("whole number", "The width tables are laid out for, when it is not the terminal's.", "the terminal's width"),
  PGHOST: external("host", "The Postgres host when the journal URL names none."),
  PGPORT: external("port", "The Postgres port when the journal URL names none.", "5432"),
  PGUSER: external("user", "The Postgres user when the journal URL names none.", "the login name"),
  PGDATABASE: external("name", "The Postgres database when the journal URL names none.", "the user"),
  PGSSLMODE: external("libpq sslmode", "TLS towards Postgres when the URL has no `sslmode`.", "prefer"),
  PGCONNECT_TIMEOUT: external("seconds", "Connection timeout towards Postgres when the URL has no `connect_timeout`."),
  PGSSLROOTCERT: external("path", "CA certificate for Postgres TLS when the URL has no `sslrootcert`."),
  PGSSLCERT: external("path", "Client certificate for Postgres TLS when the URL has no `sslcert`."),
  PGSSLKEY: external("path", "Client key for Postgres TLS when the URL has no `sslkey`."),
  CLAUDE_CONFIG_DIR: external("path", "The claude CLI's settings directory (`atomic doctor`).", "~/.claude"),
  CODEX_HOME: external("path", "The codex CLI's home: its config.toml names the default model (also when a stage sets it in `env`).", "~/.codex"),
  OPENCODE_CONFIG: external("path", "opencode's settings file (`atomic doctor`).", "$XDG_CONFIG_HOME/opencode/opencode.json"),
  OPENCODE_CONFIG_CONTENT: external("JSON", "opencode's inline settings: atomic adds its provider to them for opencode stages (a stage's `env` may set its own)."),
  PI_CODING_AGENT_DIR: external("path", "The pi CLI's settings directory (`atomic doctor`).", "~/.pi/agent"),
  // OpenTelemetry's own variables (docs/guides/observability.md): set, traces (and, from `atomic serve`, the /metrics instruments) go out over OTLP/HTTP.
  OTEL_EXPORTER_OTLP_ENDPOINT: external("URL", "OpenTelemetry: the OTLP/HTTP base URL traces and metrics go to (`/v1/traces`, `/v1/metrics` are added); set, traces are on, and the status server pushes its metrics."),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: external("URL", "OpenTelemetry: the OTLP/HTTP URL of traces, as it is (wins over OTEL_EXPORTER_OTLP_ENDPOINT); set, traces are on."),
  OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: external("URL", "OpenTelemetry: the OTLP/HTTP URL of metrics, as it is (wins over OTEL_EXPORTER_OTLP_ENDPOINT); set, the status server pushes its metrics."),
  OTEL_EXPORTER_OTLP_PROTOCOL: external("http/protobuf | http/json", "OpenTelemetry: the OTLP encoding of traces and metrics.", "http/protobuf"),
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: external("http/protobuf | http/json", "OpenTelemetry: the OTLP encoding of traces (wins over OTEL_EXPORTER_OTLP_PROTOCOL)."),
  OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: external("http/protobuf | http/json", "OpenTelemetry: the OTLP encoding of metrics (wins over OTEL_EXPORTER_OTLP_PROTOCOL)."),
  OTEL_EXPORTER_OTLP_HEADERS: variable({
    audience: "credential",
    type: "key=value,…",
    description: "OpenTelemetry: headers of every OTLP request (an API key of Honeycomb, Grafana Cloud…): kept from stages (but for the claude and codex CLIs' own spans, in their environment), redacted.",
    keptFromStages: true,
    parse: text,
  }),
  OTEL_EXPORTER_OTLP_TRACES_HEADERS: variable({ audience: "credential", type: "key=value,…", description: "OpenTelemetry: headers of the OTLP trace requests: kept from stages (but for the claude and codex CLIs' own spans, in their environment), redacted.", keptFromStages: true, parse: text }),
  OTEL_EXPORTER_OTLP_METRICS_HEADERS: variable({ audience: "credential", type: "key=value,…", description: "OpenTelemetry: headers of the OTLP metric requests: kept from stages, redacted.", keptFromStages: true, parse: text }),
  OTEL_EXPORTER_OTLP_TIMEOUT: external("milliseconds", "OpenTelemetry: how long one OTLP export may take; set, also how long a drive's last flush of its spans may wait (else 3 s).", "10000"),
  OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: external("milliseconds", "OpenTelemetry: how long one OTLP trace export may take, and a drive's last flush (wins over OTEL_EXPORTER_OTLP_TIMEOUT)."),
  OTEL_TRACES_EXPORTER: external("otlp | none", "OpenTelemetry: `none` turns traces off; `otlp` turns them on (to http://localhost:4318 without an endpoint)."),
  OTEL_METRICS_EXPORTER: external("otlp | prometheus | none", "OpenTelemetry: `none` (or only `prometheus`, the /metrics page) keeps the status server's metrics off OTLP; `otlp` pushes them (to http://localhost:4318 without an endpoint)."),
  OTEL_METRIC_EXPORT_INTERVAL: external("milliseconds", "OpenTelemetry: how often the status server pushes its metrics over OTLP.", "60000"),
  OTEL_METRIC_EXPORT_TIMEOUT: external("milliseconds", "OpenTelemetry: how long one OTLP metrics export may take.", "30000"),
  OTEL_SDK_DISABLED: external("true | false", "OpenTelemetry: `true` turns traces and OTLP metrics off."),
  OTEL_SERVICE_NAME: external("text", "OpenTelemetry: `service.name` of the traces.", "atomic"),
  OTEL_RESOURCE_ATTRIBUTES: external("key=value,…", "OpenTelemetry: more resource attributes of the traces (`deployment.environment.name=prod`)."),
  OTEL_TRACES_SAMPLER: external("sampler name", "OpenTelemetry: `always_on`, `always_off`, `traceidratio`, `parentbased_always_on`, `parentbased_always_off`, `parentbased_traceidratio`.", "parentbased_always_on"),
  OTEL_TRACES_SAMPLER_ARG: external("number", "OpenTelemetry: the ratio of the `traceidratio` samplers (0 to 1).", "1"),
  OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: external("true | false", "OpenTelemetry: `true` puts stage prompts and answers into the spans (`gen_ai.input.messages`, `gen_ai.output.messages`); off, no content leaves atomic."),

  // --- hand-offs between atomic's own processes ---
  ATOMIC_POOL_CONFIG: variable({
    audience: "internal",
    type: "JSON",
    description: "A pool coordinator's configuration (home, journal URL), from the process that starts it: never in argv, which every user can read. The child removes it from its environment at once.",
    keptFromStages: true,
    parse: text,
  }),
  ATOMIC_USER_UMASK: variable({
    audience: "internal",
    type: "octal umask",
    description: "The umask of the user who started the first atomic process, passed to atomic's own processes (which run with 0077) so stages get the user's.",
    keptFromStages: true,
    parse: text,
  }),
  ATOMIC_STARTED_BY: variable({
    audience: "internal",
    type: "api | schedule",
    description: "Set by the service for the `atomic run` child that records a run posted to its API or a schedule's tick: how the run was started (`runs --origin`). The child removes it from its environment at once.",
    keptFromStages: true,
    parse: text,
  }),
  ATOMIC_ROOT_RUN_ID: variable({ audience: "internal", type: "run id", description: "Set by the process that drives a run; every process it starts inherits it, so a later resume or the drive's end finds them in /proc.", parse: text }),
  ATOMIC_WORKER_ID: variable({ audience: "internal", type: "worker id", description: "A pool worker's id, inherited by its stages, so its coordinator can find them if the worker is lost.", parse: text }),
  ATOMIC_GUARD: variable({ audience: "internal", type: "token", description: "The token of the process group guard of the process that started a stage, in the stage's environment.", parse: text }),
  ATOMIC_GUARD_NEEDLE: variable({ audience: "internal", type: "text", description: "What the process group guard looks for in /proc/*/environ (`ATOMIC_GUARD=<token>`).", parse: text }),
  ATOMIC_READY_FD: variable({
    audience: "internal",
    type: "file descriptor",
    description: "The pipe on which a process atomic started (a run or resume the service spawned, an intercom broker) says it is ready: its run recorded, its socket listening (src/shared/ready-pipe.ts). Removed at once.",
    parse: text,
  }),
  ATOMIC_DRIVEN_BY: variable({ audience: "internal", type: "service", description: "Set by the local service on the drives it starts; recorded in the run's run_resumed event and removed at once.", parse: text }),
  ATOMIC_HEARTBEAT_MS: variable({
    audience: "internal",
    type: "milliseconds",
    default: String(WORKER_HEARTBEAT_MS),
    description: "A pool worker's heartbeat period, from its coordinator's configuration.",
    parse: positiveMs(WORKER_HEARTBEAT_MS),
  }),
  ATOMIC_LIVE_HOME: variable({
    audience: "internal",
    type: "path",
    default: "none (no live events)",
    description: "The home whose intercom broker a pool worker publishes its stages' live events to (model deltas, tool calls), from its coordinator's configuration.",
    parse: text,
  }),
  ATOMIC_PI_TOOLS: variable({
    audience: "internal",
    type: "text",
    description: "What pi's run-tools extension registers and how it calls this binary for each tool (JSON), from the stage's pi process; the extension removes it as it loads.",
    parse: text,
  }),
  ATOMIC_STAGE_TOOLS: variable({
    audience: "internal",
    type: "text",
    description: "The stage MCP server's link to its run (home, root id, credential, granted run tools), from the agent CLI's MCP configuration; removed at once.",
    parse: text,
  }),
  ATOMIC_WORK_LEASE_MS: variable({
    audience: "internal",
    type: "milliseconds",
    default: String(WORK_LEASE_MS),
    description: "A pool worker's work-item lease, from its coordinator's configuration.",
    parse: positiveMs(WORK_LEASE_MS),
  }),

  // --- tests, benchmarks, debugging ---
  ATOMIC_FAULT_POINTS: variable({
    audience: "testing",
    type: "name:n,…",
    description: "Arms named fault points (src/shared/fault-points.ts): `before-checkpoint:5` fires on the 5th hit, `name:*` on every hit. Not inherited by the intercom broker.",
    parse: text,
  }),
  ATOMIC_FAULT_ACTION: variable({ audience: "testing", type: "kill | throw | hang | stop", default: "kill", description: "What an armed fault point does: SIGKILL its process (like a power cut), throw, block the process for good (hang), or SIGSTOP it until a SIGCONT (stop).", parse: text }),
  ATOMIC_POOL_TRACE: variable({ audience: "testing", type: "1", description: "`1`: each pool role writes a timing line per event to its log (src/pool/trace.ts).", parse: isOne }),
  ATOMIC_INTERCOM_IDLE_MS: variable({
    audience: "testing",
    type: "milliseconds",
    default: String(BROKER_IDLE_MS),
    description: "How long the intercom broker stays up with no connection.",
    parse: positiveMs(BROKER_IDLE_MS),
  }),
} as const satisfies Record<string, Variable<unknown>>;

export type VariableName = keyof typeof VARIABLES;
type ValueOf<N extends VariableName> = ReturnType<(typeof VARIABLES)[N]["parse"]>;
/** The variables whose value is text (unset or empty: undefined). */
export type TextVariable = { [N in VariableName]: ValueOf<N> extends string | undefined ? N : never }[VariableName];

/** The value of `name` in this process's environment (or `from`), parsed, with its default. */
export function readEnv<N extends VariableName>(name: N, from: EnvSource = process.env): ValueOf<N> {
  return VARIABLES[name].parse(from[name]) as ValueOf<N>;
}

/** Sets (or with undefined removes) `name` in this process's environment: every child started later inherits it. */
/** The first variable with a `valid` test that is set (not blank) to a value it refuses: its name, its value and what it accepts. */
export function invalidEnv(from: EnvSource = process.env): { name: VariableName; raw: string; what: string; example: string } | undefined {
  for (const name of Object.keys(VARIABLES) as VariableName[]) {
    const valid = (VARIABLES[name] as Variable<unknown>).valid;
    const raw = from[name];
    if (valid && raw?.trim() && !valid.test(raw)) return { name, raw, what: valid.what, example: valid.example };
  }
  return undefined;
}

export function setEnv(name: VariableName, value: string | undefined): void {
  if (value === undefined) delete process.env[name];
  else process.env[name] = value;
}

/** Whether atomic itself reads or sets `name` (it is in the registry above). */
export function isRegistered(name: string): boolean {
  return Object.hasOwn(VARIABLES, name);
}

/** Sets a variable of the user's choosing (`resume --env NAME=VALUE`) for the workflow and every child started later. */
export function setAnyEnv(name: string, value: string): void {
  process.env[name] = value;
}

/** Reads `name` and removes it from this process's environment, so no child inherits it. */
export function takeEnv(name: VariableName): string | undefined {
  const value = process.env[name];
  delete process.env[name];
  return value;
}

/** This process's value of a variable a stage names in its `env` option (`NAME: true`): any name, by the workflow's request. */
export function passThroughValue(name: string): string | undefined {
  return process.env[name];
}

/** A variable of the system that atomic reads as every program does (where to find programs, the user's home, the HTTP proxy to go through). */
export function systemValue(name: "PATH" | "HOME" | "HTTPS_PROXY" | "HTTP_PROXY"): string | undefined {
  return process.env[name];
}

/** The names with `keptFromStages` (credentials and atomic's internal configuration). */
export const KEPT_FROM_STAGES: readonly VariableName[] = (Object.keys(VARIABLES) as VariableName[]).filter((n) => (VARIABLES[n] as Variable<unknown>).keptFromStages === true);

/** The credential variables: their values are secrets of this process (shared/secrets.ts). */
export const CREDENTIAL_VARIABLES = (Object.keys(VARIABLES) as VariableName[]).filter((n) => VARIABLES[n].audience === "credential" || n === "ATOMIC_JOURNAL") as readonly TextVariable[];

/**
 * The environment of a child process: this process's, with `set` applied
 * (a value sets, undefined removes) and every name `drop` accepts left out.
 */
export function childEnv(set: Partial<Record<VariableName, string | undefined>> = {}, drop?: (name: string) => boolean): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !drop?.(k)) env[k] = v;
  for (const [k, v] of Object.entries(set)) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}

/**
 * A copy of this process's environment without the names `leave` accepts:
 * what a run records of it when it starts (engine/run-environment.ts).
 */
export function environmentSnapshot(leave: (name: string) => boolean): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !leave(k)) env[k] = v;
  return env;
}

/**
 * Makes `recorded` this process's environment (engine/run-environment.ts):
 * every name outside it is removed unless `keep` accepts it (kept with this
 * process's value), every name in it set. From then on a read of a name
 * this process lacks asks `missing` for the error to throw (undefined: the
 * read is undefined, as usual). Children started later (stages, pool
 * workers: `childEnv`) inherit the result.
 */
export function pinEnvironment(recorded: Readonly<Record<string, string>>, keep: (name: string) => boolean, missing: (name: string) => Error | undefined): void {
  for (const k of Object.keys(process.env)) if (!(k in recorded) && !keep(k)) delete process.env[k];
  for (const [k, v] of Object.entries(recorded)) if (!keep(k)) process.env[k] = v;
  const env = process.env;
  process.env = new Proxy(env, {
    get(target, name, receiver) {
      if (typeof name === "string" && !(name in target)) {
        const err = missing(name);
        if (err) throw err;
      }
      return Reflect.get(target, name, receiver) as unknown;
    },
    // Straight to the real environment: through the proxy (Reflect.set's default receiver) a second write of a
    // variable redefines it with a partial descriptor, which process.env refuses.
    set(target, name, value) {
      return Reflect.set(target, name, value);
    },
  });
}
