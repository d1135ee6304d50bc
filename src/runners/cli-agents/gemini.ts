/** The Gemini CLI adapter (`gemini` runner): its flags, its records mapped onto ours, its final event. See adapters.ts and RUNNERS.md. */

import { fromInclusive, priced } from "../usage.ts";
import type { CliAdapter } from "./cli-runner.ts";
import { num, str, obj, pricing, oneLine } from "./records.ts";

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

/** `gemini -p PROMPT -o stream-json --approval-mode yolo --skip-trust [-m M] [-r SESSION]`. */
export const gemini: CliAdapter = {
  kind: "gemini",
  credentials: ["GEMINI_API_KEY", "GOOGLE_API_KEY"],
  delivery: "resume",
  assignsSession: false,
  nativeSchema: false,
  args(req, a) {
    const args = ["-p", a.message, "-o", "stream-json", "--approval-mode", "yolo", "--skip-trust"];
    if (req.model) args.push("-m", req.model);
    if (a.resume && a.sessionId) args.push("-r", a.sessionId);
    return args;
  },
  explainExit: (code) => GEMINI_EXITS[code],
  onRecord(rec, ctx) {
    const s = ctx.state;
    switch (rec.type) {
      case "init":
        s.sessionId = str(rec.session_id) ?? s.sessionId;
        s.model = str(rec.model) ?? s.model;
        return;
      case "message":
        if (rec.role === "assistant" && typeof rec.content === "string") {
          ctx.text(rec.content);
          s.text = rec.delta === false ? rec.content : s.text + rec.content;
        }
        return;
      case "tool_use":
        ctx.tool(String(rec.tool_name ?? "tool"), JSON.stringify(rec.parameters ?? {}));
        return;
      case "tool_result":
        ctx.tool(String(rec.tool_id ?? "tool"), "", rec.status === "success");
        return;
      case "error":
        if (rec.severity === "error" || rec.severity === undefined) ctx.emit({ type: "output", stream: "stderr", text: `${str(rec.message) ?? ""}\n` });
        return;
      case "result": {
        const st = obj(rec.stats);
        const model = s.model ?? ctx.request.model;
        ctx.usage({ ...priced(fromInclusive(num(st.input_tokens), num(st.cached), num(st.output_tokens)), model, pricing(ctx)), turns: 1, ...(model ? { model } : {}) });
        if (rec.status === "success") s.final = { ok: true };
        else s.final = { ok: false, code: "agent_failed", message: `gemini reported ${str(rec.status) ?? "an error"}: ${oneLine(str(obj(rec.error).message) ?? "")}` };
        return true;
      }
    }
  },
};
