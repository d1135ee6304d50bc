/**
 * What a CLI agent needs of the user's files and of the network inside a
 * sandbox (runners/sandbox/launch.ts, docs/design/sandbox.md): its own
 * state directory writable (sessions, so continueFrom, fork and resumed
 * turns keep working; its auth file is there, the one credential file
 * that stage may see), the attempt's artifact directory writable and an
 * earlier session's read-only, and its provider's endpoints: the CLI's
 * default hosts and any base URL its environment or config names.
 * Each CLI's directories follow its own environment variables, as the
 * stage's environment (not atomic's) sets them.
 */

import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { StageRequest } from "../types.ts";
import type { RunnerFiles } from "../sandbox/launch.ts";
import { sandboxEndpoints } from "../sandbox/launch.ts";
import { userHome } from "../../shared/sandbox-option.ts";

interface CliFiles {
  /** State directories and files, writable (created when missing, so what the CLI writes there lasts). */
  state: (env: Record<string, string | undefined>, home: string) => string[];
  /** Files of `state` that hold its credentials: allowed for this stage only. */
  auth: (env: Record<string, string | undefined>, home: string) => string[];
  endpoints: (env: Record<string, string | undefined>, home: string) => string[];
}

const xdg = (env: Record<string, string | undefined>, home: string, name: "XDG_CONFIG_HOME" | "XDG_DATA_HOME" | "XDG_CACHE_HOME" | "XDG_STATE_HOME", dflt: string) => env[name] || join(home, dflt);

const piDir = (env: Record<string, string | undefined>, home: string) => env.PI_CODING_AGENT_DIR || join(home, ".pi", "agent");

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
    auth: (env, home) => [join(env.CLAUDE_CONFIG_DIR || join(home, ".claude"), ".credentials.json"), join(home, ".claude.json")],
    endpoints: (env) => [...sandboxEndpoints(env.ANTHROPIC_BASE_URL), "api.anthropic.com:443"],
  },
  codex: {
    state: (env, home) => [env.CODEX_HOME || join(home, ".codex")],
    auth: (env, home) => [join(env.CODEX_HOME || join(home, ".codex"), "auth.json")],
    endpoints: (env) => [...sandboxEndpoints(env.OPENAI_BASE_URL), "api.openai.com:443", "chatgpt.com:443"],
  },
  gemini: {
    state: (_env, home) => [join(home, ".gemini")],
    auth: (_env, home) => [join(home, ".gemini", "oauth_creds.json")],
    endpoints: (env) => [...sandboxEndpoints(env.GOOGLE_GEMINI_BASE_URL), "generativelanguage.googleapis.com:443", "oauth2.googleapis.com:443"],
  },
  opencode: {
    state: (env, home) => [join(xdg(env, home, "XDG_DATA_HOME", ".local/share"), "opencode"), join(xdg(env, home, "XDG_CONFIG_HOME", ".config"), "opencode"), join(xdg(env, home, "XDG_CACHE_HOME", ".cache"), "opencode"), join(xdg(env, home, "XDG_STATE_HOME", ".local/state"), "opencode")],
    auth: (env, home) => [join(xdg(env, home, "XDG_DATA_HOME", ".local/share"), "opencode", "auth.json")],
    endpoints: () => ["api.openai.com:443", "api.anthropic.com:443", "opencode.ai:443", "models.dev:443"],
  },
};

/** The files and endpoints of `kind`'s process in a sandbox (with its stage environment `env`). */
export function cliSandboxFiles(kind: string, req: Pick<StageRequest, "artifactDir" | "continueFrom">, env: Record<string, string | undefined>): RunnerFiles {
  const home = userHome(env);
  const f = FILES[kind];
  const state = f?.state(env, home) ?? [];
  for (const dir of state) {
    if (!dir.endsWith(".json")) mkdirSync(dir, { recursive: true });
  }
  mkdirSync(req.artifactDir, { recursive: true });
  return {
    writable: [req.artifactDir, ...state],
    readable: req.continueFrom ? [req.continueFrom.artifactDir] : [],
    allowed: f?.auth(env, home) ?? [],
    endpoints: f?.endpoints(env, home) ?? [],
  };
}
