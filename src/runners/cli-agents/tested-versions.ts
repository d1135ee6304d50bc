/**
 * What `atomic doctor` says about each CLI agent: the versions its adapter
 * was verified against (first the one pinned in test/agents/package.json,
 * then newer releases the real-CLI tests also passed with, run through
 * `scripts/install-agents.sh --newest`; docs/design/runners.md "Verified
 * against the real CLIs"; these CLIs change quickly, so another version is
 * reported as untested, not refused: doctor says so, and a run warns once,
 * installed-version.ts), the credential variables it reads, and the
 * settings file it takes its provider and model from.
 */

import { homedir } from "node:os";
import { join } from "node:path";
import { readEnv, type EnvSource, type VariableName } from "../../shared/config/environment.ts";

export interface AgentNeeds {
  /** The pinned version first. */
  tested: readonly string[];
  /** Any one of these reaches a provider (or the CLI's own login). */
  keys: readonly VariableName[];
  /** The settings file, as the CLI finds it from this environment (or `env`). */
  settings(env?: EnvSource): string;
  note: string;
}

const home = (env?: EnvSource) => readEnv("HOME", env) ?? homedir();
const xdgConfig = (env?: EnvSource) => readEnv("XDG_CONFIG_HOME", env) ?? join(home(env), ".config");

export const AGENT_NEEDS: Record<string, AgentNeeds> = {
  claude: { tested: ["2.1.197", "2.1.332"], keys: ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"], settings: (env) => join(readEnv("CLAUDE_CONFIG_DIR", env) ?? join(home(env), ".claude"), "settings.json"), note: "or `claude login`" },
  codex: { tested: ["0.171.0"], keys: ["OPENAI_API_KEY"], settings: (env) => join(readEnv("CODEX_HOME", env) ?? join(home(env), ".codex"), "config.toml"), note: "or `codex login`; the provider and model in config.toml" },
  gemini: { tested: ["0.61.0"], keys: ["GEMINI_API_KEY", "GOOGLE_API_KEY"], settings: (env) => join(home(env), ".gemini", "settings.json"), note: "with GOOGLE_GEMINI_BASE_URL, settings.json must select gemini-api-key auth" },
  opencode: { tested: ["1.18.33"], keys: ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY"], settings: (env) => readEnv("OPENCODE_CONFIG", env) ?? join(xdgConfig(env), "opencode", "opencode.json"), note: "the provider's key, or apiKey in the config's provider entry; model as provider/model" },
  pi: { tested: ["0.73.1"], keys: ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY"], settings: (env) => join(readEnv("PI_CODING_AGENT_DIR", env) ?? join(home(env), ".pi", "agent"), "models.json"), note: "the provider's key, or apiKey in models.json for a custom provider; model as provider/model" },
};

/** The first x.y.z of a `--version` line. */
export function versionNumber(line: string): string | undefined {
  return /\b(\d+\.\d+\.\d+)\b/.exec(line)?.[1];
}
