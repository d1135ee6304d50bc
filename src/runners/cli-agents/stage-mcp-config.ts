/**
 * The stage MCP server as an agent CLI's configuration: the run tools a
 * stage was granted (message, ask_agent, reply) reach claude, codex, gemini and opencode
 * through an MCP server over stdio that the CLI starts, this binary in its
 * stage-MCP role (pool/stage-mcp.ts, docs/design/stage-tools.md). Its link
 * to the run (the attempt's credential among it) goes in the server's
 * environment, never on a command line: for claude in a 0600 file in the
 * attempt's artifact directory (`--mcp-config FILE`); for codex in codex's
 * own environment, which codex hands to the server it names
 * (`env_vars`); for opencode in the server's entry of the configuration
 * atomic hands it in OPENCODE_CONFIG_CONTENT; for gemini in the server's
 * entry of the settings of a gemini home of the stage's own (0600,
 * gemini-home.ts). pi has no MCP client: an
 * extension of pi's (pi-run-tools.ts, written into the attempt's artifact
 * directory, `-e FILE`) registers the tools and makes each call through
 * this binary in its stage-tool role, the link and the tools in pi's
 * environment, which the extension clears. The user's own CLI
 * configuration is never written.
 */

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROLE, selfCommand } from "../../shared/self-exec.ts";
import { STAGE_MCP_TOOLS, stageToolSpec, type StageMcpTool } from "../run-tools.ts";
import type { StageRequest } from "../types.ts";
// The file's text, not the module (the bundler embeds it verbatim).
import piRunToolsText from "./pi-run-tools.ts" with { type: "text" };

/** The MCP server's name in the CLI's configuration: claude calls its tools mcp__atomic__<tool>. */
export const STAGE_MCP_NAME = "atomic";

export interface StageMcpServer {
  command: string;
  args: string[];
  env: Record<string, string>;
  tools: StageMcpTool[];
}

/** The run tools and ask_user granted by the task's `tools` (ask_agent brings reply). */
export function grantedRunTools(tools: readonly string[] | undefined): StageMcpTool[] {
  const granted = (tools ?? []).filter((t): t is StageMcpTool => (STAGE_MCP_TOOLS as readonly string[]).includes(t));
  if (granted.includes("ask_agent") && !granted.includes("reply")) granted.push("reply");
  return granted;
}

/** How the stage MCP server suits one CLI (gemini's: runners/cli-agents/gemini.ts). */
export interface StageMcpFit {
  /** Names the server gives tools instead of their own (a CLI that would hide a tool under its own name). */
  served?: Partial<Record<StageMcpTool, string>>;
  /** Each result's text also as `structuredContent: { text }` (a CLI that would read JSON text as structured content). */
  structuredText?: true;
}

/** The stage's MCP server, when it was granted run tools and has a link to its run. */
export function stageMcpServer(req: Pick<StageRequest, "agent" | "runTools" | "cwd">, fit: StageMcpFit = {}): StageMcpServer | undefined {
  const link = req.runTools;
  const tools = grantedRunTools(req.agent?.tools);
  if (!link || tools.length === 0) return undefined;
  const [command, ...args] = selfCommand(ROLE.stageMcp);
  const value = { home: link.home, rootId: link.rootId, token: link.token, tools, cwd: req.cwd, ...fit };
  return { command: command!, args, env: { [STAGE_MCP_LINK]: JSON.stringify(value) }, tools };
}

/** Claude's `--mcp-config` file for the stage (0600, in the attempt's artifact directory). */
export function claudeMcpConfig(req: StageRequest, server: StageMcpServer): string {
  mkdirSync(req.artifactDir, { recursive: true, mode: 0o700 });
  const file = join(req.artifactDir, "mcp-config.json");
  const config = { mcpServers: { [STAGE_MCP_NAME]: { type: "stdio", command: server.command, args: server.args, env: server.env } } };
  writeFileSync(file, JSON.stringify(config), { mode: 0o600 });
  return file;
}

/** The variable that carries the server's link (pool/stage-mcp.ts takes it). */
export const STAGE_MCP_LINK = "ATOMIC_STAGE_TOOLS";

/**
 * codex's `-c` overrides that add the server for this run of codex (values are TOML; a JSON string or array of
 * strings is one). codex exec's approval policy is "never", under which an MCP tool call is refused ("requires
 * approval") unless its server's tools are approved by default. A call waits as long as the tool does (ask_agent
 * up to its timeout), not codex's 60 s default; the server starts within codex's startup wait on a loaded machine.
 */
export function codexMcpArgs(server: StageMcpServer): string[] {
  const key = `mcp_servers.${STAGE_MCP_NAME}`;
  return [
    `${key}.command=${JSON.stringify(server.command)}`,
    `${key}.args=${JSON.stringify(server.args)}`,
    `${key}.env_vars=${JSON.stringify(Object.keys(server.env))}`,
    `${key}.default_tools_approval_mode="approve"`,
    `${key}.startup_timeout_sec=60`,
    `${key}.tool_timeout_sec=${TOOL_WAIT_S}`,
  ].flatMap((c) => ["-c", c]);
}

/** How long a CLI lets one run tool call wait (ask_agent's timeout is the driver's to keep): a day. */
export const TOOL_WAIT_S = 86_400;

/**
 * opencode's `mcp.atomic` entry (a local server; opencode names its tools atomic_<tool>). Its `timeout` (5 s by
 * default) bounds every request to the server, tool calls among them: a call waits as long as the tool does.
 */
export function opencodeMcpEntry(server: StageMcpServer): Record<string, unknown> {
  return { type: "local", command: [server.command, ...server.args], environment: server.env, enabled: true, timeout: TOOL_WAIT_S * 1000 };
}

/** pi's extension file for the stage (its text is pi-run-tools.ts), in the attempt's artifact directory. */
export function piExtension(req: StageRequest): string {
  mkdirSync(req.artifactDir, { recursive: true, mode: 0o700 });
  const file = join(req.artifactDir, "atomic-run-tools.ts");
  writeFileSync(file, piRunToolsText as unknown as string, { mode: 0o600 });
  return file;
}

/** pi's environment for the extension: the link, and the tools with the command that makes one call. */
export function piExtensionEnv(server: StageMcpServer): Record<string, string> {
  const [command, ...args] = selfCommand(ROLE.stageTool);
  const tools = server.tools.map((name) => ({ name, ...stageToolSpec(name) }));
  return { ...server.env, ATOMIC_PI_TOOLS: JSON.stringify({ command, args, tools }) };
}
