/**
 * The pi adapter (`pi` runner): its flags, its records mapped onto ours,
 * its final event. See adapters.ts and docs/design/runners.md ("Verified against the
 * real CLIs"; tested with @mariozechner/pi-coding-agent 0.73.1).
 *
 * `pi --mode rpc --session <artifactDir>/pi-session.jsonl`: commands on
 * stdin (`prompt`, `steer`, `follow_up`, `abort`, `get_state`), events and
 * command responses on stdout. pi has no `--session-id`; a `.jsonl` path
 * creates the session or resumes it, so a restarted stage continues the
 * same conversation. rpc mode emits no session event: `get_state` answers
 * with data.sessionId, asked for before the first prompt.
 *
 * When a turn has ended (the protocol):
 * - `agent_end` is NOT the end: after one whose last message failed with a
 *   retryable error (500, 429, a broken stream) pi emits `auto_retry_start`
 *   and retries by itself after a delay; closing stdin there kills pi and
 *   the retry with it. So at `agent_end` the adapter sends a `get_state`
 *   as a barrier: pi writes `auto_retry_start` (or the final
 *   `auto_retry_end`) before it reads the next command, so when the
 *   barrier's response arrives with no retry pending, the turn really
 *   ended. A retry in progress ends with a later `agent_end` (and its own
 *   barrier).
 * - The turn's outcome is its last assistant message: stopReason `error`
 *   fails the stage with the provider's status mapped to the shared codes
 *   (pi's errorMessage starts with the HTTP status); an error inside the
 *   stream has no status in pi's output, only the provider's message
 *   (agent-errors.ts streamFailure: provider_unavailable unless the words
 *   say otherwise); `aborted` (our interrupt) does not fail it.
 *
 * Messages: steer and followUp are pi's own `steer` / `follow_up`. An
 * interrupt writes `abort` only; the message is queued and becomes the next
 * `prompt` once the aborted turn has ended (a `prompt` right after `abort`
 * is refused: "Agent is already processing"). Usage per assistant message
 * maps one to one onto ours, with pi's own cost.
 *
 * Tools: `--tools` (atomic's names mapped to pi's) or `--no-tools`; a model
 * that calls a tool left out gets "Tool bash not found", which is a warning
 * on the stage (records.ts warnRefusedTool). The run tools and ask_user
 * (message, ask_agent, reply) come from atomic's extension, `-e FILE`
 * (stage-mcp-config.ts piExtension), under their own names, which `--tools`
 * lets through as it does pi's.
 */

import { copyFileSync, existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { PI_SESSION_FILE } from "../../artifacts/stage-logs.ts";
import { fromExclusive, priced } from "../usage.ts";
import type { CliAdapter } from "./cli-runner.ts";
import { agentFailure, streamedErrorIn, streamFailure } from "./agent-errors.ts";
import { piExtension, piExtensionEnv, stageMcpServer } from "./stage-mcp-config.ts";
import { num, str, obj, arr, pricing, PROVIDER_KEYS, cliProviderError, reportedCost, warnRefusedTool } from "./records.ts";

const BARRIER = "atomic-turn-end";

/** atomic's tool names → pi's (pi's `ls` lists a directory; `find` is pi's too, reached through `list` as well). */
const TOOL_NAMES: Record<string, string[]> = { read: ["read"], write: ["write"], edit: ["edit"], list: ["ls", "find"], grep: ["grep"], bash: ["bash"] };

export function piTools(tools: readonly string[]): string[] {
  return [...new Set(tools.flatMap((t) => TOOL_NAMES[t] ?? [t]))];
}

export const pi: CliAdapter = {
  kind: "pi",
  credentials: PROVIDER_KEYS,
  delivery: "stream",
  assignsSession: false,
  nativeSchema: false,
  canFork: true,
  sessionFile: PI_SESSION_FILE,
  messagesJoinTurn: true,
  env: (req) => {
    const tools = stageMcpServer(req);
    return { PI_SKIP_VERSION_CHECK: "1", ...(tools ? piExtensionEnv(tools) : {}) };
  },
  args(req) {
    const session = join(req.artifactDir, PI_SESSION_FILE);
    // continueFrom: this stage opens a copy of the earlier stage's session file (made before its first process), so the earlier one
    // stays as it was: a continuation and a fork are the same here.
    const earlier = req.continueFrom ? join(req.continueFrom.artifactDir, PI_SESSION_FILE) : undefined;
    if (earlier && !existsSync(session) && existsSync(earlier)) {
      mkdirSync(req.artifactDir, { recursive: true });
      copyFileSync(earlier, session);
    }
    const args = ["--mode", "rpc", "--session", session];
    if (req.model) args.push("--model", req.model);
    if (req.agent?.tools) args.push(...(req.agent.tools.length ? ["--tools", piTools(req.agent.tools).join(",")] : ["--no-tools"]));
    if (req.agent?.system) args.push("--append-system-prompt", req.agent.system);
    if (stageMcpServer(req)) args.push("-e", piExtension(req));
    return args;
  },
  userTurn: (message) => [JSON.stringify({ type: "get_state", id: "atomic-session" }), JSON.stringify({ type: "prompt", message })],
  steer: (message) => [JSON.stringify({ type: "steer", message })],
  followUp: (message) => [JSON.stringify({ type: "follow_up", message })],
  interrupt: () => [JSON.stringify({ type: "abort" })],
  onRecord(rec, ctx) {
    const s = ctx.state;
    switch (rec.type) {
      case "agent_start":
        delete s.final;
        return;
      case "message_start":
        // An HTTP error's assistant message starts already failed; one whose stream began starts as "stop" (pi 0.73).
        if (obj(rec.message).role === "assistant") s.process.streamBegan = obj(rec.message).stopReason !== "error";
        return;
      case "message_update": {
        const ev = obj(rec.assistantMessageEvent);
        if (ev.type === "text_delta" && typeof ev.delta === "string") ctx.text(ev.delta);
        return;
      }
      case "message_end": {
        const m = obj(rec.message);
        if (m.role !== "assistant") return;
        const texts = arr(m.content).map(obj).filter((b) => b.type === "text").map((b) => String(b.text ?? ""));
        if (texts.length) s.text = texts.join("");
        const u = obj(m.usage);
        const model = str(m.model) ?? ctx.request.model;
        const cost = obj(u.cost).total;
        // A call our interrupt aborted before any usage arrived is no turn (opencode's killed run reports none either).
        if (m.stopReason === "aborted" && num(u.input) + num(u.output) + num(u.cacheRead) + num(u.cacheWrite) === 0) return;
        ctx.usage({
          ...priced(fromExclusive(num(u.input), num(u.cacheRead), num(u.cacheWrite), num(u.output)), model, pricing(ctx), reportedCost(cost)),
          turns: 1,
          ...(model ? { model } : {}),
        });
        if (m.stopReason === "error") s.final = piFailure(str(m.errorMessage) ?? "", s.process.streamBegan === true, model);
        else s.final = { ok: true };
        return;
      }
      case "auto_retry_start":
        s.process.retrying = true; // a retry pi announced and has not finished yet
        return;
      case "auto_retry_end":
        delete s.process.retrying;
        return;
      case "tool_execution_start":
        ((s.process.piCalls as Record<string, unknown> | undefined) ??= {})[String(rec.toolCallId)] = rec.args ?? {};
        ctx.tool(String(rec.toolName ?? "tool"), JSON.stringify(rec.args ?? {}));
        return;
      case "tool_execution_end": {
        const name = String(rec.toolName ?? "tool");
        ctx.tool(name, "", rec.isError !== true);
        // A tool left out of --tools is not pi's any more: "Tool bash not found" (pi 0.73), the only sign of it.
        const said = arr(obj(rec.result).content).map(obj).map((b) => String(b.text ?? "")).join("");
        if (rec.isError === true && /^Tool \S+ not found/.test(said)) {
          const ours = Object.keys(TOOL_NAMES).find((k) => TOOL_NAMES[k]!.includes(name));
          warnRefusedTool(ctx, "pi", name, (s.process.piCalls as Record<string, unknown> | undefined)?.[String(rec.toolCallId)], ours, said);
        }
        return;
      }
      case "agent_end":
        ctx.write(JSON.stringify({ type: "get_state", id: BARRIER }));
        return;
      case "response": {
        const data = obj(rec.data);
        if (rec.command === "get_state" && rec.success !== false) s.sessionId = str(data.sessionId) ?? s.sessionId;
        if (rec.id === BARRIER) {
          if (s.process.retrying) return;
          s.final ??= { ok: true };
          return true;
        }
        if (rec.success === false) ctx.emit({ type: "output", stream: "stderr", text: `pi refused ${String(rec.command)}: ${str(rec.error) ?? ""}\n` });
        return;
      }
    }
  },
};

/**
 * A failed assistant message: pi's errorMessage starts with the HTTP status
 * of a refused request ("401 …"); an error inside the reply stream carries
 * only the provider's message (no status, no type or code: pi drops them),
 * told apart by the message having started as a stream.
 */
function piFailure(said: string, streamBegan: boolean, model: string | undefined) {
  const status = /^\s*(\d{3})\b/.exec(said);
  if (status) return cliProviderError("pi", Number(status[1]), said.slice(status[0].length), {}, model);
  if (streamBegan) return streamFailure("pi", streamedErrorIn(said) ?? { message: said });
  return agentFailure("pi", said, { model });
}
