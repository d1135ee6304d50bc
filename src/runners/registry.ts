/**
 * Runners by kind: `shell`, the built-in `openai` agent loop, and the CLI
 * agents (claude, codex, gemini, opencode, pi). A runner is looked up by
 * the root (to refuse an unknown one before anything starts) and by the
 * worker that runs the stage.
 *
 * Every runner is wrapped so that its live events and its result carry no
 * known secret value (shared/secrets.ts): whatever a stage prints, the
 * key atomic uses does not travel on to the root, the live view or the
 * journal as it was.
 */

import { UsageError } from "../shared/errors.ts";
import { ShellRunner } from "./shell/shell-runner.ts";
import { OpenAIRunner } from "./openai/openai-runner.ts";
import { cliAgentRunners } from "./cli-agents/index.ts";
import type { Runner, WrapUpReason } from "./types.ts";
import { redactValue } from "../shared/secrets.ts";

const runners = new Map<string, Runner>(
  [new ShellRunner(), new OpenAIRunner(), ...cliAgentRunners()].map((r): [string, Runner] => [r.kind, redacting(r)]),
);

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
  runners.set(runner.kind, redacting(runner));
}

function redacting(runner: Runner): Runner {
  return {
    kind: runner.kind,
    ...(runner.sessions ? { sessions: runner.sessions } : {}),
    start(request, onEvent) {
      const handle = runner.start(request, (event) => onEvent(redactValue(event)));
      return {
        result: handle.result.then(redactValue),
        send: (message, mode, id) => handle.send(message, mode, id),
        interrupt: () => handle.interrupt(),
        cancel: (reason) => handle.cancel(reason),
        ...(handle.wrapUp ? { wrapUp: (text: string, reason?: WrapUpReason) => handle.wrapUp!(text, reason) } : {}),
        ...(handle.hold ? { hold: (held: boolean) => handle.hold!(held) } : {}),
      };
    },
  };
}
