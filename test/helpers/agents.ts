/**
 * The real agent CLIs, installed at pinned versions by
 * scripts/install-agents.sh into test/agents/node_modules (never global).
 * Tests point each one at a local fake provider with an isolated HOME and
 * XDG directories (docs/design/runners.md: "Pointing each at a local endpoint").
 */

import { existsSync } from "node:fs";
import { join } from "node:path";

export const AGENTS_DIR = join(import.meta.dir, "..", "agents");
export type AgentCli = "claude" | "codex" | "gemini" | "opencode" | "pi";

/** The path of a real agent CLI's binary; throws with the command that installs them when it is missing. */
export function agentBin(name: AgentCli): string {
  const bin = join(AGENTS_DIR, "node_modules", ".bin", name);
  if (!existsSync(bin)) throw new Error(`the real ${name} CLI is not installed; run: bash scripts/install-agents.sh`);
  return bin;
}
