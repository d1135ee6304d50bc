/**
 * The stage MCP server as an agent CLI's configuration: the run tools a
 * stage was granted (message, ask_agent, reply) reach claude and codex
 * through an MCP server over stdio that the CLI starts, this binary in its
 * stage-MCP role (pool/stage-mcp.ts, docs/design/stage-tools.md). Its link
 * to the run (the attempt's credential among it) goes in the server's
 * environment, never on a command line: for claude in a 0600 file in the
 * attempt's artifact directory (`--mcp-config FILE`); the user's own CLI
 * configuration is never written.
 */

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROLE, selfCommand } from "../../shared/self-exec.ts";
import { RUN_TOOLS, type RunTool } from "../run-tools.ts";
import type { StageRequest } from "../types.ts";

/** The MCP server's name in the CLI's configuration: claude calls its tools mcp__atomic__<tool>. */
export const STAGE_MCP_NAME = "atomic";

export interface StageMcpServer {
  command: string;
  args: string[];
  env: Record<string, string>;
  tools: RunTool[];
}

/** The run tools granted by the task's `tools` (ask_agent brings reply). */
export function grantedRunTools(tools: readonly string[] | undefined): RunTool[] {
  const granted = (tools ?? []).filter((t): t is RunTool => (RUN_TOOLS as readonly string[]).includes(t));
  if (granted.includes("ask_agent") && !granted.includes("reply")) granted.push("reply");
  return granted;
}

/** The stage's MCP server, when it was granted run tools and has a link to its run. */
export function stageMcpServer(req: StageRequest): StageMcpServer | undefined {
  const link = req.runTools;
  const tools = grantedRunTools(req.agent?.tools);
  if (!link || tools.length === 0) return undefined;
  const [command, ...args] = selfCommand(ROLE.stageMcp);
  return { command: command!, args, env: { ATOMIC_STAGE_TOOLS: JSON.stringify({ home: link.home, rootId: link.rootId, token: link.token, tools }) }, tools };
}

/** Claude's `--mcp-config` file for the stage (0600, in the attempt's artifact directory). */
export function claudeMcpConfig(req: StageRequest, server: StageMcpServer): string {
  mkdirSync(req.artifactDir, { recursive: true, mode: 0o700 });
  const file = join(req.artifactDir, "mcp-config.json");
  const config = { mcpServers: { [STAGE_MCP_NAME]: { type: "stdio", command: server.command, args: server.args, env: server.env } } };
  writeFileSync(file, JSON.stringify(config), { mode: 0o600 });
  return file;
}
