/** The Codex adapter (`codex` runner): its flags, its records mapped onto ours, its final event. See adapters.ts and RUNNERS.md. */

import { fromInclusive, priced } from "../usage.ts";
import type { CliAdapter } from "./cli-runner.ts";
import { num, str, obj, pricing, oneLine } from "./records.ts";

/**
 * `codex exec --json [-m M] [-C DIR] -s workspace-write --skip-git-repo-check [--output-schema F] PROMPT`;
 * `codex exec resume <id> ...` continues the thread (all flags repeated).
 * No input while running: messages are queued and delivered by resuming.
 */
export const codex: CliAdapter = {
  kind: "codex",
  credentials: ["OPENAI_API_KEY", "CODEX_API_KEY"],
  delivery: "resume",
  assignsSession: false,
  nativeSchema: true,
  args(req, a) {
    const flags = ["--json", "-C", req.cwd, "-s", "workspace-write", "--skip-git-repo-check"];
    if (req.model) flags.push("-m", req.model);
    if (a.schemaFile) flags.push("--output-schema", a.schemaFile);
    return a.resume && a.sessionId ? ["exec", "resume", a.sessionId, ...flags, a.message] : ["exec", ...flags, a.message];
  },
  onRecord(rec, ctx) {
    const s = ctx.state;
    switch (rec.type) {
      case "thread.started":
        s.sessionId = str(rec.thread_id) ?? s.sessionId;
        return;
      case "item.started": {
        const item = obj(rec.item);
        if (item.type === "command_execution" || item.type === "mcp_tool_call" || item.type === "file_change") ctx.tool(String(item.type), String(item.command ?? item.tool ?? ""));
        return;
      }
      case "item.completed": {
        const item = obj(rec.item);
        if (item.type === "agent_message" && typeof item.text === "string") {
          ctx.text(item.text);
          s.text = item.text;
        } else if (item.type === "command_execution" || item.type === "mcp_tool_call" || item.type === "file_change") {
          ctx.tool(String(item.type), String(item.command ?? item.tool ?? ""), item.status !== "failed" && num(item.exit_code) === 0);
        }
        return;
      }
      case "turn.completed": {
        const u = obj(rec.usage);
        const model = ctx.request.model;
        ctx.usage({ ...priced(fromInclusive(num(u.input_tokens), num(u.cached_input_tokens), num(u.output_tokens)), model, pricing(ctx)), turns: 1, ...(model ? { model } : {}) });
        s.final = { ok: true };
        if (ctx.request.agent?.schema && s.text) {
          try {
            s.structured = JSON.parse(s.text);
          } catch {
            // checked (and reported) against the schema later
          }
        }
        return true;
      }
      case "turn.failed":
        s.final = { ok: false, code: "agent_failed", message: `codex turn failed: ${oneLine(str(obj(rec.error).message) ?? JSON.stringify(rec.error ?? ""))}` };
        return true;
      case "error":
        s.final = { ok: false, code: "agent_failed", message: `codex reported an error: ${oneLine(str(rec.message) ?? "")}` };
        return true;
    }
  },
};
