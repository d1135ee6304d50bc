/**
 * A stage's link to its run, as the processes that carry its agent's run
 * tool calls take it (the stage MCP server, pool/stage-mcp.ts; one call for
 * pi's extension, pool/stage-tool-call.ts): home, root id, the attempt's
 * credential, the granted tools, the stage's working directory (where
 * the message tool's attachments are read from) and how the stage MCP
 * server suits the CLI, as JSON in ATOMIC_STAGE_TOOLS, removed
 * from the environment at once (runners/cli-agents/stage-mcp-config.ts
 * puts it there).
 */

import * as v from "valibot";
import { STAGE_MCP_TOOLS } from "../runners/run-tools.ts";
import { takeEnv } from "../shared/config/environment.ts";
import { writeStderr } from "../shared/raw-stderr.ts";

/** `served` and `structuredText`: how the stage MCP server suits one CLI (StageMcpFit, runners/cli-agents/stage-mcp-config.ts). */
const LinkSchema = v.object({
  home: v.string(),
  rootId: v.string(),
  token: v.string(),
  tools: v.array(v.picklist(STAGE_MCP_TOOLS)),
  cwd: v.optional(v.string()),
  served: v.optional(v.record(v.string(), v.string())),
  structuredText: v.optional(v.literal(true)),
});
export type StageToolsLink = v.InferOutput<typeof LinkSchema>;

/** The link, or exit 2 saying what is missing (these roles are started by atomic, never by hand). */
export function takeStageToolsLink(what: string): StageToolsLink {
  let raw: unknown = null;
  try {
    raw = JSON.parse(takeEnv("ATOMIC_STAGE_TOOLS") ?? "null");
  } catch {
    // not JSON: refused below
  }
  const parsed = v.safeParse(LinkSchema, raw);
  if (parsed.success) return parsed.output;
  writeStderr(`error: ${what} needs its link to the run (ATOMIC_STAGE_TOOLS); it is started by atomic for an agent stage\n`);
  process.exit(2);
}
