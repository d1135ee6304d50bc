/**
 * Runners by kind. Only `shell` exists in this version; agent runners
 * (openai, claude, codex, ...) register here later without engine changes.
 */

import { UsageError } from "../shared/errors.ts";
import { ShellRunner } from "./shell/shell-runner.ts";
import type { Runner } from "./types.ts";

const runners = new Map<string, Runner>([["shell", new ShellRunner()]]);

export function getRunner(kind: string): Runner {
  const runner = runners.get(kind);
  if (!runner) {
    throw new UsageError("unknown_runner", `no runner named "${kind}" is available in this version`, {
      hint: `available runners: ${[...runners.keys()].join(", ")}`,
    });
  }
  return runner;
}

export function registerRunner(runner: Runner): void {
  runners.set(runner.kind, runner);
}
