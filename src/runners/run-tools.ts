/**
 * The run tools: what an agent uses to reach the other stages of its run
 * (`message`, `ask_agent`, `reply`). The runner only describes them and
 * hands each call to a port; the port carries it to the run's driver,
 * which acts on it (engine/mail/stage-tools.ts) and answers with the
 * tool's result. Runners sit beside the broker's client in the layers
 * (docs/design/layers.md), so the process that runs stages sets the port
 * (a pool worker, or the root for stages it runs itself).
 *
 * A stage reaches only its own run: its request carries the run's root id
 * and a credential minted for that attempt (`runTools`); the driver
 * refuses a credential of another run or of an ended attempt.
 */

import type { StageRequest } from "./types.ts";

export const RUN_TOOLS = ["message", "ask_agent", "reply"] as const;
export type RunTool = (typeof RUN_TOOLS)[number];

/**
 * What the stage MCP server serves a CLI agent: the run tools and ask_user. The openai loop answers ask_user
 * itself by parking the stage; a CLI's call waits in the driver instead (engine/mail/stage-tools.ts).
 */
export const STAGE_MCP_TOOLS = [...RUN_TOOLS, "ask_user"] as const;
export type StageMcpTool = (typeof STAGE_MCP_TOOLS)[number];

export const ASK_USER_SPEC = {
  description:
    "Ask the person running this workflow a question and wait for the answer; the answer is this tool's result. The stage waits (for hours if need be, across restarts) until someone answers. Give choices when the answer is one of a few options.",
  parameters: {
    type: "object",
    properties: { question: { type: "string" }, choices: { type: "array", items: { type: "string" } } },
    required: ["question"],
  },
};

/** The longest ask_agent waits for the sibling's reply (the broker's longest ask is 10 minutes). */
export const ASK_AGENT_MAX_S = 540;
export const ASK_AGENT_DEFAULT_S = 120;

export type RunToolsLink = NonNullable<StageRequest["runTools"]>;

export interface RunToolsPort {
  /** One tool call of the stage `link` names; resolves with the tool's result (an error result on any failure, never a rejection). */
  call(link: RunToolsLink & { cwd?: string }, tool: RunTool, args: Record<string, unknown>, signal: AbortSignal): Promise<{ ok: boolean; output: string }>;
}

let port: RunToolsPort | undefined;

/** Set by the process that runs stages (pool worker, root); the first one set stays. */
export function setRunToolsPort(p: RunToolsPort): void {
  port ??= p;
}

export function runToolsPort(): RunToolsPort | undefined {
  return port;
}

export const RUN_TOOL_SPECS: Record<RunTool, { description: string; parameters: Record<string, unknown> }> = {
  message: {
    description:
      "Send a message to another stage of this workflow run, by its name (its path, e.g. 'review' or 'build/test') or a pattern ('review-*'). A stage that has not started yet gets it before its first turn. attach: files of your working directory to send with it (the other stage gets a copy to read). Returns who it was delivered to, or why it cannot be.",
    parameters: {
      type: "object",
      properties: { to: { type: "string" }, text: { type: "string" }, attach: { type: "array", items: { type: "string" }, description: "paths of files in your working directory" } },
      required: ["to", "text"],
    },
  },
  ask_agent: {
    description: `Ask another running stage of this run (by name) a question and wait for its answer, at most timeout_s seconds (default ${ASK_AGENT_DEFAULT_S}, at most ${ASK_AGENT_MAX_S}). The other agent sees it as a message and answers with its reply tool.`,
    parameters: {
      type: "object",
      properties: { to: { type: "string" }, question: { type: "string" }, timeout_s: { type: "integer", minimum: 1, maximum: ASK_AGENT_MAX_S } },
      required: ["to", "question"],
    },
  },
  reply: {
    description: "Answer a question another stage asked you with ask_agent: give the question's id (from the message) and your answer.",
    parameters: { type: "object", properties: { id: { type: "string" }, text: { type: "string" } }, required: ["id", "text"] },
  },
};

/** A stage MCP tool's description and JSON Schema, as the stage MCP server and pi's extension offer it. */
export function stageToolSpec(name: StageMcpTool): { description: string; parameters: Record<string, unknown> } {
  return name === "ask_user" ? ASK_USER_SPEC : RUN_TOOL_SPECS[name];
}
