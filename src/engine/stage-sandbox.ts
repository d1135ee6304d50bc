/**
 * Which sandbox a stage gets (docs/design/sandbox.md), decided in the root
 * before its first attempt: the stage's `sandbox` option, else its
 * workflow's, else the config's; none: the default, a sandbox with the
 * provider network for an agent stage and none for a shell stage. A bad
 * option, a path that does not exist, or a sandbox (asked for, or the
 * agent stages' default) where bubblewrap cannot make one fails the step
 * here, before anything is recorded or started, with one sentence and a
 * hint (code `bad_sandbox`): a stage that gets a sandbox never runs
 * without one. The default's sentence says it is the default and how to
 * turn it off (`sandbox: "off"`, on the stage, its workflow or the config).
 *
 * `stageChannels` opens atomic's own channel into a sandboxed stage that
 * was granted run tools: the intercom broker's socket directory, bound
 * read-only (a socket there can be connected to, nothing there written),
 * with the broker started first, so the stage MCP server that the CLI
 * starts inside reaches the run (docs/design/stage-tools.md).
 */

import { homedir } from "node:os";
import { dirname, resolve } from "node:path";
import type { TaskOptions, WorkflowDefinition } from "../sdk/types.ts";
import type { AtomicConfig } from "../shared/config/schema.ts";
import { readEnv } from "../shared/config/environment.ts";
import { StepFailedError } from "../shared/errors.ts";
import { resolveSandbox } from "../shared/sandbox-option.ts";
import { sandboxProblem } from "../runners/sandbox/bwrap.ts";
import type { StageRequest } from "../runners/types.ts";
import { connectBroker } from "../intercom/launch.ts";
import { intercomPaths } from "../intercom/paths.ts";

export function stageSandbox(name: string, opts: TaskOptions, definition: WorkflowDefinition, config: AtomicConfig, isAgent: boolean, artifactsDir: string): StageRequest["sandbox"] {
  const { spec, problem, byDefault } = resolveSandbox(
    [
      { value: opts.sandbox, where: `stage "${name}"` },
      { value: definition.sandbox, where: `workflow ${definition.name}` },
      { value: config.sandbox, where: "the config file" },
    ],
    isAgent,
  );
  const fail = (p: { message: string; hint: string }) => new StepFailedError(name, p.message, { code: "bad_sandbox", hint: p.hint });
  if (problem) throw fail(problem);
  if (!spec) return undefined;
  const unavailable = sandboxProblem();
  if (unavailable && byDefault) {
    throw fail({
      message: `stage "${name}": agent stages run in a sandbox by default, but ${unavailable.message.replace(/, so the stage cannot be sandboxed$/, "")}`,
      hint: `${unavailable.hint.replace(/, or set sandbox: "off" on the stage$/, "")}, or set sandbox: "off" (on the stage, its workflow or in the config file) to run agent stages unsandboxed`,
    });
  }
  if (unavailable) throw fail({ message: `stage "${name}": ${unavailable.message}`, hint: unavailable.hint });
  const home = resolve(readEnv("ATOMIC_HOME") ?? resolve(homedir(), ".atomic"));
  return { ...spec, hidden: [...new Set([home, artifactsDir])] };
}

/** The broker's socket directory for a sandboxed stage with run tools, the broker started (a failure to start is the tools' to report). */
export async function stageChannels(home: string): Promise<string[]> {
  try {
    (await connectBroker(home, { spawn: true, role: "probe" })).close();
  } catch {
    // The stage's MCP server says "the run could not be reached" when a tool is called.
  }
  return [dirname(intercomPaths(home).socket)];
}
