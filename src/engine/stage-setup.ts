/**
 * Before a stage's first attempt: which runner runs it, with which model
 * and agent options, and whether that can work here. Everything a user can
 * get wrong (an unknown runner, a CLI agent not on PATH, a missing API key
 * or model, an invalid schema, unknown tools) fails the step here, before
 * anything is recorded or started, with one sentence and a hint.
 *
 * The step's replay identity keeps the runner the task asked for ("agent"
 * when it named none), so a resume under another config is not a
 * different step.
 */

import * as v from "valibot";
import type { GenericSchema } from "valibot";
import type { StageResult, TaskOptions, WorkflowDefinition } from "../sdk/types.ts";
import { AtomicError, StepFailedError } from "../shared/errors.ts";
import type { AtomicConfig } from "../shared/config/schema.ts";
import { getRunner } from "../runners/registry.ts";
import { agentOptions, checkRunner, defaultRunner } from "../runners/agent-setup.ts";
import { untestedVersion } from "../runners/cli-agents/installed-version.ts";
import { isValibotSchema, toJsonSchema } from "../runners/json-schema.ts";
import { enabledTools } from "../runners/openai/tools.ts";

import type { AgentOptions } from "../runners/types.ts";
import { storedValue } from "./values.ts";

export interface StageSetup {
  runner: string;
  model?: string;
  agent?: AgentOptions;
  /** An agent stage (counts as a session for admission; may be wrapped up). */
  isAgent: boolean;
  /** The task's valibot schema: the root checks the final structured value with it. */
  valibot?: GenericSchema;
  /** The CLI's installed version is one the tests have not covered (runners/cli-agents/installed-version.ts). */
  versionWarning?: string;
}

export async function prepareStage(
  name: string,
  opts: TaskOptions,
  definition: WorkflowDefinition,
  config: AtomicConfig,
  /** The executor answers this stage itself (StageExecutor.answers): its runner's key and program are not needed. */
  answered?: (stage: { name: string; runner: string }) => boolean,
): Promise<StageSetup> {
  if (opts.shell === undefined && opts.prompt === undefined) {
    throw new StepFailedError(name, `stage "${name}" needs a shell command or a prompt`, { code: "bad_step" });
  }
  const runner = opts.runner ?? (opts.shell !== undefined ? "shell" : defaultRunner(config, definition.runner));
  const fail = (err: { code: string; message: string; hint?: string | undefined }) =>
    new StepFailedError(name, `stage "${name}": ${err.message}`, { code: err.code, ...(err.hint ? { hint: err.hint } : {}) });
  for (const [key, value] of Object.entries(opts.env ?? {})) {
    if (typeof value !== "string" && value !== true) {
      throw fail({ code: "bad_env", message: `env.${key} must be a string, or true to pass atomic's own ${key}`, hint: `write env: { ${key}: "value" }, or env: { ${key}: true }` });
    }
  }
  try {
    getRunner(runner);
  } catch (err) {
    if (!(err instanceof AtomicError)) throw err;
    throw fail({ code: "unknown_runner", message: err.message, hint: err.hint });
  }
  if (runner === "shell") {
    if (opts.shell === undefined) throw fail({ code: "bad_step", message: "the shell runner needs a shell command, not a prompt" });
    return { runner, isAgent: false, ...(opts.model ? { model: opts.model } : {}) };
  }
  if (opts.prompt === undefined) throw fail({ code: "bad_step", message: `the ${runner} runner needs a prompt` });
  const model = opts.model ?? definition.model ?? config.model;
  const scripted = answered?.({ name, runner }) === true;
  const problem = scripted ? undefined : checkRunner(runner, config, model);
  if (problem) throw fail(problem);
  let schema: Record<string, unknown> | undefined;
  try {
    if (opts.schema !== undefined) schema = await toJsonSchema(opts.schema);
    if (runner === "openai") enabledTools(opts.tools);
  } catch (err) {
    if (err instanceof AtomicError) throw fail(err);
    throw fail({ code: "bad_tools", message: (err as Error).message, hint: "leave tools out to allow all of them" });
  }
  // Every agent runner has the run tools and ask_user: the openai loop its own, the CLIs through the stage MCP
  // server or pi's extension (runners/cli-agents/stage-mcp-config.ts).
  const agent = agentOptions(runner, config, {
    ...(opts.tools ? { tools: opts.tools } : {}),
    ...(schema ? { schema } : {}),
    // "file": the attempt's own file (stage-options.ts), set per attempt
    ...(opts.output && opts.output !== "file" ? { output: opts.output } : {}),
    ...(opts.maxTurns !== undefined ? { maxTurns: opts.maxTurns } : {}),
    ...(opts.system ? { system: opts.system } : {}),
  });
  const versionWarning = !scripted && agent.binary ? untestedVersion(runner, agent.binary) : undefined;
  return {
    runner,
    ...(model ? { model } : {}),
    agent,
    isAgent: true,
    ...(versionWarning ? { versionWarning } : {}),
    ...(opts.schema !== undefined && isValibotSchema(opts.schema) ? { valibot: opts.schema as GenericSchema } : {}),
  };
}

/**
 * The root's check of a completed agent stage's structured output against
 * the task's schema (valibot's own rules, stricter than the JSON Schema the
 * model saw): a mismatch fails the stage.
 */
export function checkStructured(setup: StageSetup, schemaGiven: boolean, result: StageResult): StageResult {
  if (result.status !== "completed" || !schemaGiven) return result;
  if (result.structured === undefined) {
    return { ...result, status: "failed", error: { code: "structured_output_invalid", message: "the agent finished without structured output" } };
  }
  if (!setup.valibot) return result;
  const parsed = v.safeParse(setup.valibot, result.structured);
  if (parsed.success) return { ...result, structured: storedValue(parsed.output, "structured output") };
  const issue = parsed.issues[0];
  const path = issue.path?.map((p) => String(p.key)).join(".") ?? "";
  return {
    ...result,
    status: "failed",
    error: { code: "structured_output_invalid", message: `the structured output does not match the schema${path ? ` at "${path}"` : ""}: ${issue.message}` },
  };
}
