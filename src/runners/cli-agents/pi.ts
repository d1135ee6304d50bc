/** The pi adapter (`pi` runner): its flags, its records mapped onto ours, its final event. See adapters.ts and RUNNERS.md. */

import { fromExclusive, priced } from "../usage.ts";
import type { CliAdapter } from "./cli-runner.ts";
import { num, str, obj, arr, pricing, oneLine, PROVIDER_KEYS } from "./records.ts";

/**
 * `pi --mode rpc --session-id <id>`: commands on stdin (`prompt`, `steer`,
 * `follow_up`, `abort`), events on stdout. Usage per assistant message maps
 * one to one onto ours. `agent_end` ends a turn.
 */
export const pi: CliAdapter = {
  kind: "pi",
  credentials: PROVIDER_KEYS,
  delivery: "stream",
  assignsSession: true,
  nativeSchema: false,
  args(req, a) {
    const args = ["--mode", "rpc", "--session-id", a.sessionId!];
    if (req.model) args.push("--model", req.model);
    if (req.agent?.tools) args.push("--tools", req.agent.tools.join(","));
    if (req.agent?.system) args.push("--append-system-prompt", req.agent.system);
    return args;
  },
  userTurn: (message) => [JSON.stringify({ type: "prompt", message })],
  steer: (message) => [JSON.stringify({ type: "steer", message })],
  followUp: (message) => [JSON.stringify({ type: "follow_up", message })],
  interrupt: (message) => [JSON.stringify({ type: "abort" }), ...(message ? [JSON.stringify({ type: "prompt", message })] : [])],
  onRecord(rec, ctx) {
    const s = ctx.state;
    switch (rec.type) {
      case "session":
        s.sessionId = str(rec.id) ?? s.sessionId;
        return;
      case "agent_start":
        delete s.final;
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
        ctx.usage({
          ...priced(fromExclusive(num(u.input), num(u.cacheRead), num(u.cacheWrite), num(u.output)), model, pricing(ctx), typeof cost === "number" ? cost : undefined),
          turns: 1,
          ...(model ? { model } : {}),
        });
        if (m.stopReason === "error" || m.stopReason === "aborted") {
          s.final = { ok: false, code: "agent_failed", message: `pi reported ${m.stopReason}: ${oneLine(str(m.errorMessage) ?? "")}` };
        }
        return;
      }
      case "tool_execution_start":
        ctx.tool(String(rec.toolName ?? "tool"), JSON.stringify(rec.args ?? {}));
        return;
      case "tool_execution_end":
        ctx.tool(String(rec.toolName ?? "tool"), "", rec.isError !== true);
        return;
      case "response":
        if (rec.success === false) ctx.emit({ type: "output", stream: "stderr", text: `pi refused ${String(rec.command)}: ${str(rec.error) ?? ""}\n` });
        return;
      case "agent_end":
        s.final ??= { ok: true };
        return true;
    }
  },
};
