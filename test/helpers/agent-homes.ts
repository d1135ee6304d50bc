/**
 * Isolated homes for the real codex and gemini CLIs, pointed at a fake
 * provider (docs/design/runners.md, "Pointing each at a local endpoint"): HOME and the
 * XDG directories in a temp dir of the test, the CLI's own config there,
 * its update checks, telemetry and remote features switched off, and every
 * other connection sent to the fake's trap (`proxyEnv`). `env` is for
 * `runAtomic`: the stage's CLI inherits it from the worker.
 *
 * The atomic home gets a config.json naming the real binary
 * (`runners.<cli>.path`) and prices for the fake's models, so a test can
 * check that a stage is priced.
 */

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { agentBin, withAgentNode, type AgentCli } from "./agents.ts";
import type { FakeProvider } from "./fake-provider.ts";
import { makeTempDir } from "./temp.ts";

export interface AgentHome {
  /** ATOMIC_HOME (config.json written). */
  home: string;
  /** The stage's cwd-to-be and the CLI's HOME live under here. */
  dir: string;
  env: Record<string, string>;
}

/** USD per million tokens: micro-dollars = tokens × price. */
export const PRICES = {
  m: { inputPerMTok: 2, outputPerMTok: 10, cacheReadPerMTok: 0.5, cacheWritePerMTok: 3 },
  "gemini-2.5-flash": { inputPerMTok: 1, outputPerMTok: 4, cacheReadPerMTok: 0.25 },
  "gemini-3.1-pro-preview": { inputPerMTok: 3, outputPerMTok: 12, cacheReadPerMTok: 0.5 },
};

function baseHome(cli: AgentCli, fake: FakeProvider<unknown>): AgentHome {
  const home = makeTempDir(`atomic-${cli}-home-`);
  const dir = makeTempDir(`atomic-${cli}-user-`);
  const user = join(dir, "home");
  for (const d of [user, join(user, ".config"), join(user, ".local", "share"), join(user, ".cache"), join(user, ".local", "state")]) mkdirSync(d, { recursive: true });
  writeFileSync(join(home, "config.json"), JSON.stringify({ runners: { [cli]: { path: agentBin(cli) } }, pricing: PRICES }));
  const env = {
    HOME: user,
    XDG_CONFIG_HOME: join(user, ".config"),
    XDG_DATA_HOME: join(user, ".local", "share"),
    XDG_CACHE_HOME: join(user, ".cache"),
    XDG_STATE_HOME: join(user, ".local", "state"),
    ...fake.proxyEnv(),
    ...(cli === "gemini" ? { PATH: withAgentNode(process.env.PATH ?? "") } : {}),
  };
  return { home, dir, env };
}

/** claude: the fake Anthropic API as ANTHROPIC_BASE_URL, its non-essential traffic, updates and telemetry off, retries cut to two. */
export function claudeHome(fake: FakeProvider<unknown>): AgentHome {
  const h = baseHome("claude", fake);
  Object.assign(h.env, {
    ANTHROPIC_BASE_URL: fake.url,
    ANTHROPIC_API_KEY: "sk-ant-fake",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_AUTOUPDATER: "1",
    DISABLE_TELEMETRY: "1",
    DISABLE_ERROR_REPORTING: "1",
    CLAUDE_CODE_MAX_RETRIES: "2",
  });
  return h;
}

/** codex: CODEX_HOME with config.toml (model "m" of provider "fake", Responses API); retries cut to one. */
export function codexHome(fake: FakeProvider<unknown>): AgentHome {
  const h = baseHome("codex", fake);
  const codexDir = join(h.dir, "codex");
  mkdirSync(codexDir);
  writeFileSync(
    join(codexDir, "config.toml"),
    [
      'model = "m"',
      'model_provider = "fake"',
      "check_for_update_on_startup = false",
      "[analytics]",
      "enabled = false",
      // These reach github.com and chatgpt.com at startup.
      "[features]",
      "plugins = false",
      "remote_plugin = false",
      "apps = false",
      // Its workspace-write sandbox makes /tmp writable and creates .git, .codex, .agents and .aws in it (as
      // read-only mount targets), which would stay behind: the stage's cwd and TMPDIR (the test's) are enough.
      "[sandbox_workspace_write]",
      "exclude_slash_tmp = true",
      "[model_providers.fake]",
      'name = "fake"',
      `base_url = "${fake.url}/v1"`,
      'env_key = "OPENAI_API_KEY"',
      'wire_api = "responses"',
      "request_max_retries = 1",
      "stream_max_retries = 1",
      "",
    ].join("\n"),
  );
  Object.assign(h.env, { CODEX_HOME: codexDir, OPENAI_API_KEY: "sk-fake-codex" });
  return h;
}

/**
 * gemini: ~/.gemini/settings.json (API-key auth, which GOOGLE_GEMINI_BASE_URL needs; no usage statistics, no update checks).
 * atomic's gemini adapter itself starts gemini with GEMINI_CLI_NO_RELAUNCH (one process, not a second start of
 * itself): the home leaves it out, so that the tests see what atomic sets.
 */
export function geminiHome(fake: FakeProvider<unknown>): AgentHome {
  const h = baseHome("gemini", fake);
  mkdirSync(join(h.env.HOME!, ".gemini"));
  writeFileSync(
    join(h.env.HOME!, ".gemini", "settings.json"),
    JSON.stringify({
      security: { auth: { selectedType: "gemini-api-key" } },
      privacy: { usageStatisticsEnabled: false },
      general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
      telemetry: { enabled: false },
    }),
  );
  Object.assign(h.env, { GOOGLE_GEMINI_BASE_URL: fake.url, GEMINI_API_KEY: "fake-gemini-key" });
  return h;
}

/** A workflow's inputs as a JSON file (a 300 KiB prompt cannot be an argv element of atomic either). */
export function inputsFile(h: AgentHome, inputs: Record<string, unknown>): string {
  const path = join(h.dir, `inputs-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(path, JSON.stringify(inputs));
  return path;
}
