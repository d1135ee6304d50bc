/** The CLI agent runners: one CliAgentRunner per adapter (claude, codex, gemini, opencode, pi). */

import { ADAPTERS } from "./adapters.ts";
import { CliAgentRunner } from "./cli-runner.ts";

export function cliAgentRunners(): CliAgentRunner[] {
  return ADAPTERS.map((a) => new CliAgentRunner(a));
}
