/** The opencode adapter (`opencode` runner): its flags, its records mapped onto ours, its final event. See adapters.ts and RUNNERS.md. */

import { fromExclusive, priced } from "../usage.ts";
import type { CliAdapter } from "./cli-runner.ts";
import { num, str, obj, pricing, oneLine, PROVIDER_KEYS } from "./records.ts";

/** `opencode run --format json [-m provider/model] [-s SESSION] --dir D MESSAGE`: per-step usage and cost, summed. */
export const opencode: CliAdapter = {
  kind: "opencode",
  credentials: PROVIDER_KEYS,
  delivery: "resume",
  assignsSession: false,
  nativeSchema: false,
  args(req, a) {
    const args = ["run", "--format", "json", "--dir", req.cwd];
    if (req.model) args.push("-m", req.model);
    if (a.resume && a.sessionId) args.push("-s", a.sessionId);
    args.push(a.message);
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
        ctx.tool(String(part.tool ?? "tool"), JSON.stringify(state.input ?? {}), state.status === undefined ? undefined : state.status !== "error");
        return;
      }
      case "step_finish": {
        const t = obj(part.tokens);
        const cache = obj(t.cache);
        const model = ctx.request.model;
        ctx.usage({
          ...priced(fromExclusive(num(t.input), num(cache.read), num(cache.write), num(t.output) + num(t.reasoning)), model, pricing(ctx), typeof part.cost === "number" ? part.cost : undefined),
          turns: 1,
          ...(model ? { model } : {}),
        });
        if (part.reason !== "tool-calls") s.final = { ok: true };
        return;
      }
      case "error": {
        const e = obj(rec.error);
        s.final = { ok: false, code: "agent_failed", message: `opencode reported ${str(e.name) ?? "an error"}: ${oneLine(str(obj(e.data).message) ?? str(e.message) ?? "")}` };
        return true;
      }
      case "done":
        s.final ??= { ok: true };
        return true;
    }
  },
};
