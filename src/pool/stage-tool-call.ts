/**
 * One run tool call for an agent CLI that has no MCP client: pi's
 * extension (runners/cli-agents/pi-run-tools.ts) starts this binary in the
 * role `--internal-stage-tool` for each call its agent makes. The link to
 * the run comes in ATOMIC_STAGE_TOOLS (pool/stage-tools-link.ts), the call
 * `{ tool, args }` on stdin; the call goes to the run's driver exactly as
 * the stage MCP server's do (intercom/stage-tools.ts), and its result
 * `{ ok, output }` is one JSON line on stdout. SIGTERM (the agent aborted
 * the call) ends the wait with an error result. A bundle of its own, without
 * the MCP SDK (shared/entry-points.ts).
 */

import { writeSync } from "node:fs";
import { StageToolsClient } from "../intercom/stage-tools.ts";
import type { StageMcpTool } from "../runners/run-tools.ts";
import { takeStageToolsLink } from "./stage-tools-link.ts";

export async function stageToolCallMain(): Promise<void> {
  const link = takeStageToolsLink("a stage tool call");
  const abort = new AbortController();
  process.once("SIGTERM", () => abort.abort());
  let outcome: { ok: boolean; output: string };
  let call: { tool?: unknown; args?: unknown } = {};
  try {
    call = JSON.parse(await Bun.stdin.text()) as typeof call;
  } catch {
    // not JSON: refused below
  }
  const tool = typeof call.tool === "string" ? (call.tool as StageMcpTool) : undefined;
  if (!tool || !link.tools.includes(tool)) {
    outcome = { ok: false, output: `error: there is no tool ${JSON.stringify(call.tool)}; the tools are ${link.tools.join(", ")}` };
  } else {
    const client = new StageToolsClient(link.home);
    const args = call.args && typeof call.args === "object" ? (call.args as Record<string, unknown>) : {};
    outcome = await Promise.race([
      client.call(link, tool, args, abort.signal),
      new Promise<{ ok: boolean; output: string }>((resolve) => abort.signal.addEventListener("abort", () => resolve({ ok: false, output: "error: the call was stopped before the run answered" }), { once: true })),
    ]);
    client.close();
  }
  writeSync(1, `${JSON.stringify(outcome)}\n`);
  process.exit(0);
}
