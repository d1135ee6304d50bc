/**
 * The Gemini CLI adapter (`gemini` runner, verified with gemini 0.61.0):
 * its flags, its records mapped onto ours, its final event. See adapters.ts
 * and docs/design/runners.md ("Verified against the real CLIs").
 *
 * - `gemini -p "" -o stream-json --approval-mode yolo --skip-trust [-m M] --session-id UUID`,
 *   the prompt on stdin (gemini appends `-p` to what stdin holds); the
 *   session id is ours, chosen up front; queued messages resume it with
 *   `-r UUID` (no input while running).
 * - gemini 0.61 gives piped stdin 500 ms from when it starts reading it
 *   (readStdin's timer), then goes on as if nothing was piped: when its
 *   event loop comes round to the pipe later than that (a busy machine),
 *   the prompt already waiting there is lost and gemini exits 42 "No input
 *   provided via stdin" before any model call (its chats file for the
 *   session id already written). That process is started again, the file
 *   removed (cli-runner.ts `lostPrompt`, `forgetNewSession`). The prompt
 *   stays off the command line, which other users of the machine can read
 *   (docs/design/security.md).
 * - Usage: `result.stats` is for this process only; its `models` holds the
 *   counts per model actually called (without `-m` the init event says
 *   "auto" and a router model may appear with zero tokens), so each model
 *   is priced on its own and the stage's model is the one that did the work.
 *   input_tokens includes cached ones.
 * - Failure: a `result` whose status is not success. A broken stream comes
 *   as an `error` event followed by a result with no error of its own: the
 *   event's message is the stage's. Provider errors are classified from
 *   gemini's `[API Error: {...}]` text (agent-errors.ts). An error the
 *   provider sends inside its reply stream reaches us without its status or
 *   words: gemini 0.61 retries the stream three times and then reports only
 *   "Model stream ended without a finish reason", so the stage fails as
 *   provider_unavailable with that sentence (nothing else is in gemini's
 *   output to say more).
 * - Tools: with `tools` set, a policy file (`--policy`, in the attempt's
 *   artifact directory) denies every gemini tool but the ones atomic's
 *   names map to (GEMINI_TOOLS); gemini then leaves the others out of what
 *   it offers the model. `tools: []` leaves it none. A model that calls one
 *   anyway gets gemini's "Tool … not found" (a tool_result error of type
 *   tool_not_registered): a warning on the stage (records.ts).
 * - Run tools (ask_user, message, ask_agent, reply): the stage MCP server
 *   in the settings of a gemini home of the stage's own (GEMINI_CLI_HOME,
 *   gemini-home.ts); gemini offers its tools as `mcp_atomic_<tool>`
 *   (`ask_user` as `mcp_atomic_ask_person`: GEMINI_FIT), and
 *   the policy file lets the server's tools through (`mcpName`, with a
 *   `toolName`, which 0.61 requires of every rule).
 * - Exit codes without a final event are explained (GEMINI_EXITS).
 * - Needs, with GOOGLE_GEMINI_BASE_URL, `~/.gemini/settings.json` saying
 *   `{"security":{"auth":{"selectedType":"gemini-api-key"}}}` (else exit 41).
 * - Started with GEMINI_CLI_NO_RELAUNCH=true: without it gemini starts a
 *   second Node process running itself again (to raise its heap limit, and
 *   so that its interactive UI can restart itself); that child is what does
 *   the work and already runs with this variable set. One process instead
 *   of two: about 1.4 of a `gemini --version`'s 3.2 CPU-seconds on a 2-core
 *   machine, and a second less before the first model request.
 */

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { StageRequest } from "../types.ts";
import { fromInclusive, priced } from "../usage.ts";
import { agentFailure } from "./agent-errors.ts";
import type { CliAdapter } from "./cli-runner.ts";
import { num, str, obj, pricing, warnRefusedTool } from "./records.ts";
import { geminiStageHome } from "./gemini-home.ts";
import { geminiSessions } from "./gemini-sessions.ts";
import { STAGE_MCP_NAME, stageMcpServer, type StageMcpFit } from "./stage-mcp-config.ts";

const GEMINI_EXITS: Record<number, string> = {
  41: "failed to authenticate (exit 41)",
  42: "refused its input (exit 42)",
  44: "hit a sandbox error (exit 44)",
  52: "found a bad configuration (exit 52)",
  53: "reached its turn limit (exit 53)",
  54: "failed in a tool (exit 54)",
  55: "refused an untrusted workspace (exit 55)",
  130: "was cancelled (exit 130)",
};

/**
 * The stage MCP server as gemini 0.61 needs it. Run with `-p`, gemini always leaves out its built-in `ask_user` (it
 * has no one to ask), and with it any MCP tool whose own name is `ask_user` (ToolRegistry.isActiveTool matches a
 * server's tool by its short name too): the server's is `ask_person` (the model sees mcp_atomic_ask_person). And
 * gemini parses a result's text as JSON into structuredContent when there is none, failing the call when that is
 * not an object (a reply of "42"): the server sends `{ text }` as structuredContent itself.
 */
const GEMINI_FIT: StageMcpFit = { served: { ask_user: "ask_person" }, structuredText: true };

/** atomic's tool names → gemini 0.61's own. */
export const GEMINI_TOOLS: Record<string, readonly string[]> = {
  read: ["read_file"],
  write: ["write_file"],
  edit: ["replace"],
  list: ["list_directory", "glob"],
  grep: ["grep_search"],
  bash: ["run_shell_command", "list_background_processes", "read_background_output"],
};

export const gemini: CliAdapter = {
  kind: "gemini",
  credentials: ["GEMINI_API_KEY", "GOOGLE_API_KEY"],
  delivery: "resume",
  assignsSession: true,
  nativeSchema: false,
  /** gemini resumes a session (`-r`) but has no way to branch one off. */
  canFork: false,
  sessionStore: geminiSessions,
  promptOnStdin: true,
  lostPrompt: { code: 42, stderr: /No input provided via stdin/ },
  env: (req, base) => {
    const mcp = stageMcpServer(req, GEMINI_FIT);
    return { GEMINI_CLI_NO_RELAUNCH: "true", ...(mcp ? { GEMINI_CLI_HOME: geminiStageHome(req, mcp, base) } : {}) };
  },
  args(req, a) {
    const args = ["-p", "", "-o", "stream-json", "--approval-mode", "yolo", "--skip-trust"];
    if (req.model) args.push("-m", req.model);
    if (a.sessionId) args.push(a.resume ? "-r" : "--session-id", a.sessionId);
    if (req.agent?.tools) args.push("--policy", toolPolicy(req, req.agent.tools));
    return args;
  },
  explainExit: (code) => GEMINI_EXITS[code],
  onRecord(rec, ctx) {
    const s = ctx.state;
    switch (rec.type) {
      case "init":
        s.sessionId = str(rec.session_id) ?? s.sessionId;
        if (rec.model !== "auto") s.model = str(rec.model) ?? s.model;
        return;
      case "message":
        if (rec.role === "assistant" && typeof rec.content === "string") {
          ctx.text(rec.content);
          s.text = rec.delta === false ? rec.content : s.text + rec.content;
        }
        return;
      case "tool_use": {
        const name = String(rec.tool_name ?? "tool");
        // tool_result names only the call's id: its name and arguments are kept for it (transcript, warnings).
        const calls = ((s.process.geminiCalls as Record<string, { name: string; args: unknown }> | undefined) ??= {});
        calls[String(rec.tool_id)] = { name, args: rec.parameters ?? {} };
        ctx.tool(name, JSON.stringify(rec.parameters ?? {}));
        return;
      }
      case "tool_result": {
        const call = (s.process.geminiCalls as Record<string, { name: string; args: unknown }> | undefined)?.[String(rec.tool_id)];
        const name = call?.name ?? String(rec.tool_id ?? "tool");
        ctx.tool(name, "", rec.status === "success");
        const error = obj(rec.error);
        // A tool the stage's policy left out is not registered (gemini never offered it); a policy "deny" of one it has.
        if (rec.status !== "success" && /not_registered|policy|denied/i.test(String(error.type ?? ""))) {
          warnRefusedTool(ctx, "gemini", name, call?.args, Object.keys(GEMINI_TOOLS).find((k) => GEMINI_TOOLS[k]!.includes(name)), str(error.message));
        }
        return;
      }
      case "error":
        if (rec.severity === "error" || rec.severity === undefined) {
          s.memo.geminiError = str(rec.message);
          ctx.emit({ type: "output", stream: "stderr", text: `${str(rec.message) ?? ""}\n` });
        }
        return;
      case "result": {
        recordUsage(rec, ctx);
        if (rec.status === "success") s.final = { ok: true };
        else s.final = agentFailure("gemini", str(obj(rec.error).message) ?? (s.memo.geminiError as string | undefined) ?? `status ${str(rec.status) ?? "error"}`, { model: s.model ?? ctx.request.model });
        return true;
      }
    }
  },
};

/** One usage delta per model that did work (each priced on its own); the stage's model is the busiest. */
function recordUsage(rec: Record<string, unknown>, ctx: Parameters<CliAdapter["onRecord"]>[1]): void {
  const st = obj(rec.stats);
  const byModel = Object.entries(obj(st.models))
    .map(([model, m]) => ({ model, u: obj(m) }))
    .filter(({ u }) => num(u.input_tokens) + num(u.output_tokens) > 0)
    .sort((a, b) => num(a.u.input_tokens) + num(a.u.output_tokens) - (num(b.u.input_tokens) + num(b.u.output_tokens)));
  const rows = byModel.length ? byModel : [{ model: ctx.state.model ?? ctx.request.model ?? "", u: st }];
  rows.forEach(({ model, u }, i) => {
    const m = model || undefined;
    ctx.usage({ ...priced(fromInclusive(num(u.input_tokens), num(u.cached), num(u.output_tokens)), m, pricing(ctx)), turns: i === 0 ? 1 : 0, ...(m ? { model: m } : {}) });
  });
  if (byModel.length) ctx.state.model = byModel.at(-1)!.model;
}

/** A policy file that denies every tool (lowest priority) and allows those `tools` name, and the stage MCP server's. */
function toolPolicy(req: StageRequest, tools: readonly string[]): string {
  const allowed = tools.flatMap((t) => GEMINI_TOOLS[t] ?? []);
  const rules = ['[[rule]]\ntoolName = "*"\ndecision = "deny"\npriority = 1\n'];
  if (allowed.length) rules.push(`[[rule]]\ntoolName = ${JSON.stringify(allowed)}\ndecision = "allow"\npriority = 100\n`);
  // gemini 0.61 refuses a policy file whole when a rule has no toolName (its docs say mcpName alone will do).
  if (stageMcpServer(req, GEMINI_FIT)) rules.push(`[[rule]]\nmcpName = ${JSON.stringify(STAGE_MCP_NAME)}\ntoolName = "*"\ndecision = "allow"\npriority = 100\n`);
  mkdirSync(req.artifactDir, { recursive: true });
  const path = join(req.artifactDir, "gemini-policy.toml");
  writeFileSync(path, rules.join("\n"));
  return path;
}
