/**
 * What a CLI agent needs of the user's files and of the network inside a
 * sandbox (runners/sandbox/launch.ts, docs/design/sandbox.md): its own
 * state directory writable (sessions, so continueFrom, fork and resumed
 * turns keep working), its auth file in there read-only (the one
 * credential file that stage may see), a config file its environment
 * names elsewhere read-only (OPENCODE_CONFIG, OPENCODE_MODELS_PATH), the
 * attempt's artifact directory writable and an earlier session's
 * read-only, and its provider's endpoints: the CLI's default hosts and any
 * base URL its environment or config names (codex's config.toml,
 * opencode's config, pi's models.json), and with traces on (a TRACEPARENT)
 * the OTLP endpoint its own spans go to. Each CLI's directories follow its
 * own environment variables, as the stage's environment (not atomic's)
 * sets them: gemini's are the user's gemini home, though a stage granted
 * run tools runs gemini with a home of its own (gemini-home.ts), in the
 * artifact directory, whose entries link to the user's.
 */

import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { StageRequest } from "../types.ts";
import type { RunnerFiles } from "../sandbox/launch.ts";
import { sandboxEndpoints } from "../sandbox/launch.ts";
import { userHome } from "../../shared/sandbox-option.ts";
import { readOnly as codexReadOnly } from "./codex-tools.ts";
import { geminiUserDir } from "./gemini-home.ts";

interface CliFiles {
  /** State directories and files, writable (created when missing, so what the CLI writes there lasts). */
  state: (env: Record<string, string | undefined>, home: string) => string[];
  /** Files of `state` that hold its credentials: shown to this stage only, read-only. */
  auth: (env: Record<string, string | undefined>, home: string) => string[];
  /** Credential paths of `state` that this CLI keeps writing (claude's ~/.claude.json): shown to this stage only, writable. */
  ownState?: (env: Record<string, string | undefined>, home: string) => string[];
  /** Files elsewhere that the CLI reads (a config its environment names). */
  config?: (env: Record<string, string | undefined>, home: string) => string[];
  endpoints: (env: Record<string, string | undefined>, home: string) => string[];
}

const xdg = (env: Record<string, string | undefined>, home: string, name: "XDG_CONFIG_HOME" | "XDG_DATA_HOME" | "XDG_CACHE_HOME" | "XDG_STATE_HOME", dflt: string) => env[name] || join(home, dflt);

const piDir = (env: Record<string, string | undefined>, home: string) => env.PI_CODING_AGENT_DIR || join(home, ".pi", "agent");

/** A JSON text's value, or undefined when it is absent or not JSON. */
const parse = (text: string | undefined): unknown => {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
};
const json = (file: string | undefined): unknown => {
  try {
    return file ? parse(readFileSync(file, "utf8")) : undefined;
  } catch {
    return undefined;
  }
};

/** The base URLs of codex's config.toml providers (`[model_providers.X] base_url`), if any. */
function codexBaseUrls(dir: string): string[] {
  try {
    const config = Bun.TOML.parse(readFileSync(join(dir, "config.toml"), "utf8")) as { model_providers?: Record<string, { base_url?: unknown }> };
    return Object.values(config.model_providers ?? {}).flatMap((p) => (typeof p.base_url === "string" ? [p.base_url] : []));
  } catch {
    return [];
  }
}

/** The base URLs (`provider.X.options.baseURL`) of opencode configs given as JSON texts. */
function opencodeBaseUrls(...configs: unknown[]): string[] {
  return configs.flatMap((c) => {
    const providers = (c as { provider?: Record<string, { options?: { baseURL?: unknown } }> } | undefined)?.provider ?? {};
    return Object.values(providers).flatMap((p) => (typeof p?.options?.baseURL === "string" ? [p.options.baseURL] : []));
  });
}

const opencodeConfigDir = (env: Record<string, string | undefined>, home: string) => join(xdg(env, home, "XDG_CONFIG_HOME", ".config"), "opencode");

/** The base URLs of pi's models.json (its custom providers), if any. */
function piBaseUrls(dir: string): string[] {
  try {
    const models = JSON.parse(readFileSync(join(dir, "models.json"), "utf8")) as { providers?: Record<string, { baseUrl?: unknown }> };
    return Object.values(models.providers ?? {}).flatMap((p) => (typeof p.baseUrl === "string" ? [p.baseUrl] : []));
  } catch {
    return [];
  }
}

const FILES: Record<string, CliFiles> = {
  pi: {
    state: (env, home) => [piDir(env, home)],
    auth: (env, home) => [join(piDir(env, home), "auth.json")],
    endpoints: (env, home) => [...sandboxEndpoints(...piBaseUrls(piDir(env, home))), "api.anthropic.com:443", "api.openai.com:443", "generativelanguage.googleapis.com:443"],
  },
  claude: {
    state: (env, home) => [env.CLAUDE_CONFIG_DIR || join(home, ".claude"), join(home, ".claude.json")],
    auth: (env, home) => [join(env.CLAUDE_CONFIG_DIR || join(home, ".claude"), ".credentials.json")],
    ownState: (_env, home) => [join(home, ".claude.json")],
    endpoints: (env) => [...sandboxEndpoints(env.ANTHROPIC_BASE_URL), "api.anthropic.com:443"],
  },
  codex: {
    state: (env, home) => [env.CODEX_HOME || join(home, ".codex")],
    auth: (env, home) => [join(env.CODEX_HOME || join(home, ".codex"), "auth.json")],
    endpoints: (env, home) => [...sandboxEndpoints(env.OPENAI_BASE_URL, ...codexBaseUrls(env.CODEX_HOME || join(home, ".codex"))), "api.openai.com:443", "chatgpt.com:443"],
  },
  gemini: {
    state: (env) => [geminiUserDir(env)],
    auth: (env) => [join(geminiUserDir(env), "oauth_creds.json")],
    endpoints: (env) => [...sandboxEndpoints(env.GOOGLE_GEMINI_BASE_URL), "generativelanguage.googleapis.com:443", "oauth2.googleapis.com:443"],
  },
  opencode: {
    state: (env, home) => [join(xdg(env, home, "XDG_DATA_HOME", ".local/share"), "opencode"), opencodeConfigDir(env, home), join(xdg(env, home, "XDG_CACHE_HOME", ".cache"), "opencode"), join(xdg(env, home, "XDG_STATE_HOME", ".local/state"), "opencode")],
    auth: (env, home) => [join(xdg(env, home, "XDG_DATA_HOME", ".local/share"), "opencode", "auth.json")],
    config: (env) => [env.OPENCODE_CONFIG, env.OPENCODE_MODELS_PATH].filter((f): f is string => !!f),
    endpoints: (env, home) => [
      ...sandboxEndpoints(...opencodeBaseUrls(json(env.OPENCODE_CONFIG), json(join(opencodeConfigDir(env, home), "opencode.json")), parse(env.OPENCODE_CONFIG_CONTENT))),
      "api.openai.com:443",
      "api.anthropic.com:443",
      "opencode.ai:443",
      "models.dev:443",
    ],
  },
};

/**
 * The files and endpoints of `kind`'s process in a sandbox: `env` is its environment, `stage` the stage's
 * before the adapter's additions (its directories are the user's as that one names them).
 */
export function cliSandboxFiles(kind: string, req: Pick<StageRequest, "artifactDir" | "continueFrom" | "agent">, env: Record<string, string | undefined>, stage = env): RunnerFiles {
  const home = userHome(stage);
  const f = FILES[kind];
  const state = f?.state(stage, home) ?? [];
  for (const dir of state) {
    if (!dir.endsWith(".json")) mkdirSync(dir, { recursive: true });
  }
  mkdirSync(req.artifactDir, { recursive: true });
  const auth = f?.auth(stage, home) ?? [];
  return {
    writable: [req.artifactDir, ...state],
    readable: [...(req.continueFrom ? [req.continueFrom.artifactDir] : []), ...(f?.config?.(env, home) ?? []).filter((p) => existsSync(p))],
    readOnly: auth,
    allowed: [...auth, ...(f?.ownState?.(stage, home) ?? [])],
    endpoints: [...(f?.endpoints(env, home) ?? []), ...otlpEndpoints(env)],
    // codex's own sandbox is off inside atomic's (codex.ts): its read-only tools get a read-only cwd here.
    ...(kind === "codex" && codexReadOnly(req) ? { cwdReadOnly: true } : {}),
  };
}

/** With traces on, the OTLP/HTTP endpoint of the stage's environment: a CLI that sends its own spans reaches it. */
function otlpEndpoints(env: Record<string, string | undefined>): string[] {
  if (!env.TRACEPARENT) return [];
  return sandboxEndpoints(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT);
}
