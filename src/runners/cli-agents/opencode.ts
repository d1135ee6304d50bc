/**
 * The opencode adapter (`opencode` runner): its flags, its records mapped
 * onto ours, its final event. See adapters.ts and docs/design/runners.md ("Verified
 * against the real CLIs"; tested with opencode-ai 1.18.33).
 *
 * `opencode run --format json --dir D [-m provider/model] [-s SESSION]`,
 * the message on stdin (opencode reads it there when stdin is not a TTY; an
 * argv message with a space reaches the model wrapped in quotes, and argv
 * fails above about 128 KiB). Each record is `{type, sessionID, part}`:
 * - `step_finish` closes one model call: its tokens (input excludes cache
 *   reads and writes) and cost are summed; reason `tool-calls` means another
 *   step follows, `stop` (or `length`, ...) ends the run: there is no `done`
 *   event. opencode retries a step whose stream broke without limit (reason
 *   `unknown`, zero tokens, forever): after a few in a row the adapter ends
 *   the process and fails the stage as provider_bad_response.
 * - `error` carries the provider's HTTP status, body and headers: mapped to
 *   the openai runner's codes (records.ts cliProviderError). An error inside
 *   the reply stream has no status: opencode reports it as an UnknownError
 *   whose message is the provider's error object as JSON (message, type,
 *   code), mapped by its type or code (agent-errors.ts streamFailure).
 *
 * Settings opencode reads only from its config, given through
 * OPENCODE_CONFIG_CONTENT (merged over the user's own config):
 * - the title-generation call opencode makes per new session is switched
 *   off (`agent.title.disable`): it is not the stage's work, and its tokens
 *   appear in no event, so the stage's usage would silently miss them;
 * - its snapshots are switched off (`snapshot: false`) unless the
 *   OPENCODE_CONFIG_CONTENT it is given (the stage's `env`, else atomic's
 *   own environment) names `snapshot`: in a git work tree
 *   opencode otherwise keeps a second git store of the whole tree in its
 *   data directory (`git add` of every file at each step) for its
 *   undo/revert, which no atomic stage uses (docs/design/runners.md,
 *   "What atomic switches off in opencode");
 * - `tools` (atomic's names) becomes opencode's `tools` map: every opencode
 *   tool not named is switched off (`tools: []`: all of them). A model that
 *   calls one anyway gets opencode's "invalid" tool ("Model tried to call
 *   unavailable tool 'bash'"): a warning on the stage (records.ts);
 * - the run tools (message, ask_agent, reply): the stage MCP server as the
 *   local MCP server `atomic` (`mcp.atomic`, its link in its `environment`;
 *   stage-mcp-config.ts), whose tools opencode names `atomic_<tool>`.
 * Steer and followUp are queued and delivered by resuming the session
 * (`-s`) when the run ends; interrupt kills the run and resumes with the
 * message (opencode run takes no input while it runs).
 */

import type { StageRequest } from "../types.ts";
import { fromExclusive, priced } from "../usage.ts";
import type { CliAdapter } from "./cli-runner.ts";
import { agentFailure, streamedErrorIn, streamFailure } from "./agent-errors.ts";
import { num, str, obj, pricing, PROVIDER_KEYS, cliProviderError, reportedCost, warnRefusedTool, type Rec } from "./records.ts";
import { readEnv } from "../../shared/config/environment.ts";
import { STAGE_MCP_NAME, opencodeMcpEntry, stageMcpServer } from "./stage-mcp-config.ts";
import { keepOpencodeSession, restoreOpencodeSession } from "./opencode-sessions.ts";

/** atomic's tool names → opencode's (opencode has no `list`: `glob` lists files). */
const TOOL_NAMES: Record<string, string> = { read: "read", write: "write", edit: "edit", list: "glob", grep: "grep", bash: "bash" };
/** opencode 1.18's own tools (those it sent to the provider), all switched off unless named. */
const OPENCODE_TOOLS = ["bash", "edit", "glob", "grep", "read", "skill", "task", "todowrite", "webfetch", "write", "list", "patch", "websearch"];
/** Broken steps in a row after which opencode's endless retry is stopped. */
const MAX_BROKEN_STEPS = 3;

export function opencodeConfig(req: Pick<StageRequest, "agent" | "runTools" | "cwd">, existing: string | undefined): string {
  let base: Rec = {};
  try {
    base = obj(existing ? JSON.parse(existing) : {});
  } catch {
    // the user's value is not JSON: opencode would refuse it too; ours replaces it
  }
  const agent = obj(base.agent);
  const out: Rec = { snapshot: false, ...base, agent: { ...agent, title: { ...obj(agent.title), disable: true } } };
  const tools = req.agent?.tools;
  if (tools) {
    const allowed = new Set(tools.map((t) => TOOL_NAMES[t] ?? t));
    out.tools = { ...obj(base.tools), ...Object.fromEntries(OPENCODE_TOOLS.map((t) => [t, allowed.has(t)])) };
  }
  const mcp = stageMcpServer(req);
  if (mcp) out.mcp = { ...obj(base.mcp), [STAGE_MCP_NAME]: opencodeMcpEntry(mcp) };
  return JSON.stringify(out);
}

export const opencode: CliAdapter = {
  kind: "opencode",
  credentials: PROVIDER_KEYS,
  delivery: "resume",
  assignsSession: false,
  nativeSchema: false,
  canFork: true,
  sessionCommands: { keep: keepOpencodeSession, restore: restoreOpencodeSession },
  promptOnStdin: true,
  env(req) {
    return {
      OPENCODE_CONFIG_CONTENT: opencodeConfig(req, req.env?.OPENCODE_CONFIG_CONTENT === undefined || req.env.OPENCODE_CONFIG_CONTENT === true ? readEnv("OPENCODE_CONFIG_CONTENT") : req.env.OPENCODE_CONFIG_CONTENT),
      OPENCODE_DISABLE_AUTOUPDATE: "1",
    };
  },
  args(req, a) {
    const args = ["run", "--format", "json", "--dir", req.cwd];
    if (req.model) args.push("-m", req.model);
    if (a.resume && a.sessionId) args.push("-s", a.sessionId);
    if (a.resume && a.fork) args.push("--fork");
    return args;
  },
  onRecord(rec, ctx) {
    const s = ctx.state;
    s.sessionId = str(rec.sessionID) ?? s.sessionId;
    const part = obj(rec.part);
    switch (rec.type) {
      case "step_start":
        s.text = "";
        return;
      case "text":
        if (typeof part.text === "string") {
          ctx.text(part.text);
          s.text += part.text;
        }
        return;
      case "tool_use": {
        const state = obj(part.state);
        if (part.tool === "invalid") {
          // opencode answers a call of a tool it does not offer through its "invalid" tool (the model's arguments are gone).
          const input = obj(state.input);
          const name = str(input.tool) ?? "?";
          warnRefusedTool(ctx, "opencode", name, undefined, Object.keys(TOOL_NAMES).find((k) => TOOL_NAMES[k] === name), str(input.error));
        }
        ctx.tool(String(part.tool ?? "tool"), JSON.stringify(state.input ?? {}), state.status === undefined ? undefined : state.status !== "error");
        return;
      }
      case "step_finish": {
        const t = obj(part.tokens);
        const cache = obj(t.cache);
        const model = ctx.request.model;
        const tokens = num(t.input) + num(t.output) + num(t.reasoning) + num(cache.read) + num(cache.write);
        if (part.reason === "unknown" && tokens === 0) {
          const n = Number(s.process.brokenSteps ?? 0) + 1;
          s.process.brokenSteps = n;
          if (n >= MAX_BROKEN_STEPS) {
            s.final = { ok: false, code: "provider_bad_response", message: `opencode: the provider's stream ended before its end ${n} times in a row (opencode retries it without limit; stopped)` };
            ctx.stop();
          }
          return;
        }
        delete s.process.brokenSteps;
        ctx.usage({
          ...priced(fromExclusive(num(t.input), num(cache.read), num(cache.write), num(t.output) + num(t.reasoning)), model, pricing(ctx), reportedCost(part.cost)),
          turns: 1,
          ...(model ? { model } : {}),
        });
        if (part.reason !== "tool-calls" && part.reason !== "unknown") s.final ??= { ok: true };
        return;
      }
      case "error": {
        const e = obj(rec.error);
        const data = obj(e.data);
        const said = str(data.responseBody) ?? str(data.message) ?? str(e.message) ?? str(e.name) ?? "";
        const headers = Object.fromEntries(Object.entries(obj(data.responseHeaders)).map(([k, v]) => [k, String(v)]));
        if (typeof data.statusCode === "number") s.final = cliProviderError("opencode", data.statusCode, said, headers, ctx.request.model);
        else {
          // An error inside the reply stream: opencode passes the provider's error object on as the message's text.
          const streamed = streamedErrorIn(said);
          s.final = streamed ? streamFailure("opencode", streamed) : agentFailure("opencode", said, { model: ctx.request.model });
        }
        return true;
      }
    }
  },
};
