/**
 * pi's run tools: a pi extension (pi has no MCP client; its extensions
 * register tools with `pi.registerTool`). atomic does not import this
 * module: its text is written into the stage attempt's artifact directory
 * and handed to pi with `-e FILE` (stage-mcp-config.ts `piExtension`); pi
 * loads it with its own TypeScript loader, so it stands alone (node
 * built-ins only, no imports of atomic's).
 *
 * What it gets from pi's environment, removed at once so pi's shell tool
 * never inherits them: ATOMIC_PI_TOOLS (the tools to register, their
 * schemas, and the command that makes one call) and ATOMIC_STAGE_TOOLS
 * (the stage's link to its run, its credential among it). Each call starts
 * that command (this binary in its stage-tool role, pool/stage-tool-call.ts)
 * with the link in its environment and `{ tool, args }` on stdin, and reads
 * `{ ok, output }` from its stdout: the output is the tool's result, an
 * error result (a thrown Error, pi's way) when it is not ok. An aborted call
 * stops the command. See docs/design/stage-tools.md.
 */

import { spawn } from "node:child_process";

interface ToolSpec {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

interface ToolResult {
  content: { type: "text"; text: string }[];
  details: Record<string, never>;
}

/** The part of pi's ExtensionAPI this extension uses. */
interface PiExtensionApi {
  registerTool(tool: {
    name: string;
    label: string;
    description: string;
    parameters: Record<string, unknown>;
    execute(toolCallId: string, params: unknown, signal?: AbortSignal): Promise<ToolResult>;
  }): void;
}

const setup = JSON.parse(process.env.ATOMIC_PI_TOOLS ?? "null") as { command: string; args: string[]; tools: ToolSpec[] } | null;
const link = process.env.ATOMIC_STAGE_TOOLS;
delete process.env.ATOMIC_PI_TOOLS;
delete process.env.ATOMIC_STAGE_TOOLS;

export default function atomicRunTools(pi: PiExtensionApi): void {
  if (!setup || !link) return;
  for (const tool of setup.tools) {
    pi.registerTool({
      name: tool.name,
      label: tool.name,
      description: tool.description,
      parameters: tool.parameters,
      async execute(_id, params, signal) {
        const outcome = await call(setup, link, tool.name, params, signal);
        if (!outcome.ok) throw new Error(outcome.output);
        return { content: [{ type: "text", text: outcome.output }], details: {} };
      },
    });
  }
}

function call(s: { command: string; args: string[] }, stageLink: string, tool: string, args: unknown, signal: AbortSignal | undefined): Promise<{ ok: boolean; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(s.command, s.args, { env: { ...process.env, ATOMIC_STAGE_TOOLS: stageLink }, stdio: ["pipe", "pipe", "inherit"] });
    let out = "";
    const stop = () => child.kill("SIGTERM");
    signal?.addEventListener("abort", stop, { once: true });
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => (out += chunk));
    child.on("error", (err) => resolve({ ok: false, output: `error: atomic's run tools could not be started (${err.message})` }));
    child.on("close", (code) => {
      signal?.removeEventListener("abort", stop);
      try {
        const r = JSON.parse(out) as { ok?: unknown; output?: unknown };
        resolve({ ok: r.ok === true, output: String(r.output ?? "") });
      } catch {
        resolve({ ok: false, output: `error: the run tool call ended without a result (exit ${code})` });
      }
    });
    child.stdin.end(JSON.stringify({ tool, args: args ?? {} }));
  });
}
