/**
 * The MCP server of `atomic mcp`, over stdio, built on the MCP SDK's
 * low-level `Server` (the high-level one takes zod schemas; atomic's are
 * valibot, converted to JSON Schema by the stage-schema converter, a bundle
 * of its own loaded on first use: runners/json-schema.ts). It answers
 * `tools/list` from the tool table (tools.ts) and `tools/call` by checking
 * the arguments and calling the tool. Stdout carries only the protocol;
 * nothing else in this process may write there.
 */

import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import * as v from "valibot";
import { toJsonSchema } from "../../runners/json-schema.ts";
import type { Operator } from "../../service/operator.ts";
import { AtomicError } from "../../shared/errors.ts";
import { VERSION } from "../../shared/version.ts";
import { TOOLS, argumentProblem } from "./tools.ts";

const INSTRUCTIONS =
  "Operate atomic, a durable workflow engine: list and show runs, start workflows, read a stage's transcript, message stages, answer questions, pause, unpause, cancel, resume, rerun and fork runs. Run ids may be shortened to a unique prefix.";

/** Serves MCP on stdin/stdout until stdin ends. */
export async function serveMcp(op: Operator): Promise<void> {
  const server = new Server({ name: "atomic", version: VERSION }, { capabilities: { tools: {} }, instructions: INSTRUCTIONS });
  const listed = await Promise.all(
    TOOLS.map(async (t) => ({
      name: t.name,
      title: t.annotations.title,
      description: t.description,
      inputSchema: await inputSchema(t.schema),
      annotations: t.annotations,
    })),
  );
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: listed }));
  server.setRequestHandler(CallToolRequestSchema, async (req): Promise<CallToolResult> => {
    const t = TOOLS.find((x) => x.name === req.params.name);
    if (!t) return refusal(`there is no tool ${JSON.stringify(req.params.name)}`, `the tools are ${TOOLS.map((x) => x.name).join(", ")}`);
    const parsed = v.safeParse(t.schema, req.params.arguments ?? {});
    if (!parsed.success) return refusal(argumentProblem(t, parsed.issues), "see the tool's input schema (tools/list)");
    try {
      const value = await t.call(op, parsed.output);
      return { content: [{ type: "text", text: JSON.stringify(value, null, 2) }], structuredContent: value as Record<string, unknown> };
    } catch (err) {
      if (err instanceof AtomicError && err.disposition === "usage") return refusal(err.message, err.hint);
      throw err;
    }
  });
  const transport = new StdioServerTransport();
  const ended = new Promise<void>((resolve) => {
    process.stdin.once("end", resolve);
    process.stdin.once("close", resolve);
    server.onclose = resolve;
  });
  await server.connect(transport);
  await ended;
  await server.close();
}

async function inputSchema(schema: v.GenericSchema): Promise<{ type: "object"; [k: string]: unknown }> {
  const { $schema: _drop, ...json } = await toJsonSchema(schema);
  return { ...json, type: "object" };
}

/** A refused call: the sentence and the hint, as the CLI prints them. */
function refusal(message: string, hint?: string): CallToolResult {
  return { isError: true, content: [{ type: "text", text: `error: ${message}${hint ? `\nhint: ${hint}` : ""}` }] };
}
