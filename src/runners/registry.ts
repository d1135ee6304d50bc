/**
 * Runners by kind: `shell`, the built-in `openai` agent loop, and the CLI
 * agents (claude, codex, gemini, opencode, pi). A runner is looked up by
 * the root (to refuse an unknown one before anything starts) and by the
 * worker that runs the stage.
 */

import { UsageError } from "../shared/errors.ts";
import { ShellRunner } from "./shell/shell-runner.ts";
import { OpenAIRunner } from "./openai/openai-runner.ts";
import { cliAgentRunners } from "./cli-agents/index.ts";
import type { Runner } from "./types.ts";

const runners = new Map<string, Runner>([
  ["shell", new ShellRunner()],
  ["openai", new OpenAIRunner()],
  ...cliAgentRunners().map((r): [string, Runner] => [r.kind, r]),
]);

export function getRunner(kind: string): Runner {
  const runner = runners.get(kind);
  if (!runner) {
    throw new UsageError("unknown_runner", `no runner named "${kind}" is available`, {
      hint: `available runners: ${[...runners.keys()].join(", ")}`,
    });
  }
  return runner;
}

export function registerRunner(runner: Runner): void {
  runners.set(runner.kind, runner);
}
