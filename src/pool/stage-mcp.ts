/**
 * The stage MCP server: how an agent CLI's stage (claude, codex, gemini, opencode)
 * gets the run tools (message, ask_agent, reply: runners/run-tools.ts) and
 * ask_user (the call waits in the run's driver until a person answers). The CLI
 * starts it over stdio from the MCP configuration atomic gives it for the
 * stage (runners/cli-agents/stage-mcp-config.ts); its link to the run
 * (home, root id, the attempt's credential, the granted tools) comes in
 * ATOMIC_STAGE_TOOLS, removed from its environment at once. Each call goes
 * to the run's driver like the openai runner's (intercom/stage-tools.ts);
 * the driver's answer is the result, an error result when it refuses.
 * Stdout carries only the protocol. It ends when the CLI closes stdin.
 */

import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { StageToolsClient } from "../intercom/stage-tools.ts";
import { stageToolSpec, type StageMcpTool } from "../runners/run-tools.ts";
import { VERSION } from "../shared/version.ts";
import { takeStageToolsLink } from "./stage-tools-link.ts";

export async function stageMcpMain(): Promise<void> {
  const link = takeStageToolsLink("the stage MCP server");
  const client = new StageToolsClient(link.home);
  const server = new Server({ name: "atomic", version: VERSION }, { capabilities: { tools: {} }, instructions: "Reach the other stages of this workflow run (message them, ask a running one and wait for its answer, reply to a question asked of you) and the person running it (ask_user)." });
  // A tool is served under its own name, or the one its link gives it (gemini's ask_user), and called by that name.
  const served = (name: StageMcpTool) => link.served?.[name] ?? name;
  // A renamed tool says its own name too: prompts (the builtins', the user's) ask for ask_user by that name.
  const described = (name: StageMcpTool) => (served(name) === name ? "" : `This is the ${name} tool (named ${served(name)} here). `) + stageToolSpec(name).description;
  const tools = link.tools.map((name) => ({ name: served(name), description: described(name), inputSchema: stageToolSpec(name).parameters as { type: "object" } }));
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra): Promise<CallToolResult> => {
    const name = link.tools.find((t) => served(t) === req.params.name);
    if (!name) return { isError: true, content: [{ type: "text", text: `error: there is no tool ${JSON.stringify(req.params.name)}; the tools are ${link.tools.map(served).join(", ")}` }] };
    const outcome = await client.call(link, name, (req.params.arguments ?? {}) as Record<string, unknown>, extra.signal);
    return { ...(outcome.ok ? {} : { isError: true }), content: [{ type: "text", text: outcome.output }], ...(link.structuredText ? { structuredContent: { text: outcome.output } } : {}) };
  });
  const ended = new Promise<void>((resolve) => {
    process.stdin.once("end", resolve);
    process.stdin.once("close", resolve);
    server.onclose = resolve;
  });
  await server.connect(new StdioServerTransport());
  await ended;
  client.close();
  await server.close();
  process.exit(0);
}
