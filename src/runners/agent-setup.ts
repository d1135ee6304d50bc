/**
 * What an agent stage needs before it may start, decided in the root from
 * the task's options, the workflow's defaults and the config:
 * - which runner (task `runner`, else the workflow's, else config /
 *   ATOMIC_RUNNER, else "openai") and which model;
 * - whether that runner is usable here (`checkRunner`): the openai runner
 *   needs a model and, for a non-local endpoint, OPENAI_API_KEY; a CLI
 *   agent needs its binary (config `runners.<name>.path`, else its name on
 *   PATH). A problem is one sentence and a hint, raised before anything
 *   starts; `atomic doctor` shows the same checks;
 * - the AgentOptions the stage request carries to a worker (plain data,
 *   never the key: workers read OPENAI_API_KEY from their environment).
 */

import { isAbsolute, resolve } from "node:path";
import { CONFIG_DEFAULTS, priceOf, type AtomicConfig } from "../shared/config/schema.ts";
import type { AgentOptions } from "./types.ts";
import { readEnv, type EnvSource } from "../shared/config/environment.ts";

/** CLI agents and the program each runs by default. */
/** Each CLI agent's binary, how to install it, and whether it reports the cost of its turns itself (else: the price table). */
export const CLI_AGENTS: Record<string, { binary: string; install: string; reportsCost: boolean }> = {
  claude: { binary: "claude", install: "install Claude Code (npm install -g @anthropic-ai/claude-code)", reportsCost: true },
  codex: { binary: "codex", install: "install Codex (npm install -g @openai/codex)", reportsCost: false },
  gemini: { binary: "gemini", install: "install Gemini CLI (npm install -g @google/gemini-cli)", reportsCost: false },
  opencode: { binary: "opencode", install: "install opencode (npm install -g opencode-ai)", reportsCost: true },
  pi: { binary: "pi", install: "install pi (npm install -g @mariozechner/pi-coding-agent)", reportsCost: true },
};

/** Why a cost budget cannot see what `runner` spends on `model`, or undefined when it can (a reported cost, or a price). */
export function unpricedReason(config: AtomicConfig, runner: string, model: string | undefined): string | undefined {
  if (CLI_AGENTS[runner]?.reportsCost || priceOf(config.pricing, model)) return undefined;
  const what = model ? `model "${model}"` : `runner ${runner}'s default model`;
  return `${what} has no price (add it under "pricing" in the config), so ${runner === "openai" ? "unless the provider reports a cost, " : ""}its tokens count as $0 against --max-cost`;
}

export interface RunnerProblem {
  code: string;
  message: string;
  hint: string;
}

export function defaultRunner(config: AtomicConfig, workflowRunner?: string): string {
  return workflowRunner ?? config.runner ?? CONFIG_DEFAULTS.runner;
}

/** The binary a CLI agent runs here: its absolute path, or undefined when it cannot be found. */
export function findBinary(kind: string, config: AtomicConfig, env?: EnvSource): { path: string | undefined; wanted: string } {
  const wanted = config.runners?.[kind]?.path ?? CLI_AGENTS[kind]?.binary ?? kind;
  if (wanted.includes("/")) {
    const abs = isAbsolute(wanted) ? wanted : resolve(wanted);
    return { path: Bun.which(abs) ?? undefined, wanted };
  }
  return { path: Bun.which(wanted, { PATH: readEnv("PATH", env) ?? "" }) ?? undefined, wanted };
}

export function openaiBaseUrl(config: AtomicConfig): string {
  return config.openai?.baseUrl ?? CONFIG_DEFAULTS.openai.baseUrl;
}

function isLocal(url: string): boolean {
  try {
    const host = new URL(url).hostname;
    return host === "localhost" || host === "127.0.0.1" || host === "[::1]" || host === "::1" || host.endsWith(".localhost");
  } catch {
    return false;
  }
}

/** Why `kind` cannot run a stage here (undefined: it can). `model` is the stage's resolved model. */
export function checkRunner(kind: string, config: AtomicConfig, model: string | undefined, env?: EnvSource): RunnerProblem | undefined {
  if (kind === "shell") return undefined;
  if (kind === "openai") {
    const base = openaiBaseUrl(config);
    try {
      new URL(base);
    } catch {
      return { code: "bad_config", message: `the openai base URL ${JSON.stringify(base)} is not a URL`, hint: "fix ATOMIC_OPENAI_BASE_URL or openai.baseUrl in config.json" };
    }
    const apiKey = readEnv("OPENAI_API_KEY", env);
    if (!apiKey && !isLocal(base)) {
      return {
        code: "missing_api_key",
        message: `the openai runner needs an API key for ${base}, and OPENAI_API_KEY is not set`,
        hint: "export OPENAI_API_KEY=…, or point ATOMIC_OPENAI_BASE_URL at a local server (Ollama, llama.cpp, vLLM)",
      };
    }
    // A pasted key with its line ending: no HTTP client will send it (a header cannot hold a line break).
    if (apiKey && /[\r\n\0]/.test(apiKey)) {
      return {
        code: "bad_api_key",
        message: "OPENAI_API_KEY holds a line break or a NUL character, which no request can carry",
        hint: "set OPENAI_API_KEY to the key alone, without a trailing newline",
      };
    }
    if (!model) {
      return {
        code: "no_model",
        message: "the openai runner needs a model, and none is set",
        hint: "pass model in ctx.task options, set model in the workflow or in $ATOMIC_HOME/config.json, or export ATOMIC_MODEL",
      };
    }
    return undefined;
  }
  const agent = CLI_AGENTS[kind];
  if (!agent) return undefined; // not a known agent: the registry decides (unknown_runner)
  const { path, wanted } = findBinary(kind, config, env);
  if (!path) {
    const where = wanted.includes("/") ? `at ${wanted}` : "on PATH";
    return {
      code: "runner_not_found",
      message: `the ${kind} runner needs the program ${JSON.stringify(wanted)}, which is not ${where === "on PATH" ? "on PATH" : `executable ${where}`}`,
      hint: `${agent.install}, or set runners.${kind}.path in $ATOMIC_HOME/config.json`,
    };
  }
  return undefined;
}

/** The stage request's agent options for `kind` (call after checkRunner said yes). */
export function agentOptions(
  kind: string,
  config: AtomicConfig,
  task: { tools?: string[]; schema?: Record<string, unknown>; output?: string; maxTurns?: number; system?: string },
  env?: EnvSource,
): AgentOptions {
  const out: AgentOptions = {};
  if (task.tools) out.tools = task.tools;
  if (task.schema) out.schema = task.schema;
  if (task.output) out.output = task.output;
  if (task.maxTurns !== undefined) out.maxTurns = task.maxTurns;
  if (task.system) out.system = task.system;
  if (config.pricing) out.pricing = config.pricing;
  if (kind === "openai") {
    out.baseUrl = openaiBaseUrl(config);
    if (config.openai?.maxRetries !== undefined) out.maxRetries = config.openai.maxRetries;
    if (config.openai?.maxBackoffMs !== undefined) out.maxBackoffMs = config.openai.maxBackoffMs;
    if (config.openai?.requestTimeoutMs !== undefined) out.requestTimeoutMs = config.openai.requestTimeoutMs;
  } else if (CLI_AGENTS[kind]) {
    const found = findBinary(kind, config, env);
    if (found.path) out.binary = found.path;
    const args = config.runners?.[kind]?.args;
    if (args?.length) out.args = args;
  }
  return out;
}
