/** The Claude Code adapter (`claude` runner): its flags, its records mapped onto ours, its final event. See adapters.ts and RUNNERS.md. */

import { fromExclusive, priced } from "../usage.ts";
import type { AdapterContext, CliAdapter } from "./cli-runner.ts";
import { num, str, obj, arr, pricing, oneLine } from "./records.ts";

/**
 * `claude -p --output-format stream-json --verbose --input-format stream-json --session-id <uuid>`:
 * user turns are JSON lines on stdin. Messages written mid-turn are taken
 * after the current tool call (best effort); interrupt is a control_request.
 * The `result` record ends a turn; its usage and total_cost_usd are read as
 * running totals of the process (deltas are counted), which is also right
 * for the usual single-turn stage.
 */
export const claude: CliAdapter & { seen: WeakMap<AdapterContext["state"], { cost: number; usage: number[] }> } = {
  kind: "claude",
  credentials: ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"],
  delivery: "stream",
  assignsSession: true,
  nativeSchema: true,
  seen: new WeakMap(),
  args(req, a) {
    const args = ["-p", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json"];
    args.push(a.resume ? "--resume" : "--session-id", a.sessionId!);
    if (req.model) args.push("--model", req.model);
    if (req.agent?.tools) args.push("--allowedTools", req.agent.tools.join(","));
    if (req.agent?.maxTurns) args.push("--max-turns", String(req.agent.maxTurns));
    if (req.agent?.schema) args.push("--json-schema", JSON.stringify(req.agent.schema));
    if (req.agent?.system) args.push("--append-system-prompt", req.agent.system);
    return args;
  },
  userTurn: (message) => [JSON.stringify({ type: "user", message: { role: "user", content: message } })],
  steer: (message) => [JSON.stringify({ type: "user", message: { role: "user", content: message } })],
  interrupt: (message) => [
    JSON.stringify({ type: "control_request", request_id: `int-${Date.now()}`, request: { subtype: "interrupt" } }),
    ...(message ? [JSON.stringify({ type: "user", message: { role: "user", content: message } })] : []),
  ],
  onRecord(rec, ctx) {
    const s = ctx.state;
    switch (rec.type) {
      case "system":
        if (rec.subtype === "init") {
          s.sessionId = str(rec.session_id) ?? s.sessionId;
          s.model = str(rec.model) ?? s.model;
        }
        return;
      case "assistant":
        for (const block of arr(obj(rec.message).content)) {
          const b = obj(block);
          if (b.type === "text" && typeof b.text === "string") ctx.text(b.text);
          else if (b.type === "tool_use") ctx.tool(String(b.name ?? "tool"), JSON.stringify(b.input ?? {}));
        }
        return;
      case "user":
        for (const block of arr(obj(rec.message).content)) {
          const b = obj(block);
          if (b.type === "tool_result") ctx.tool("result", String(b.tool_use_id ?? ""), b.is_error !== true);
        }
        return;
      case "result": {
        s.sessionId = str(rec.session_id) ?? s.sessionId;
        s.text = str(rec.result) ?? s.text;
        if (rec.structured_output !== undefined) s.structured = rec.structured_output;
        const u = obj(rec.usage);
        const models = Object.keys(obj(rec.modelUsage));
        const model = models[0] ?? s.model ?? ctx.request.model;
        const totals = [num(u.input_tokens), num(u.cache_read_input_tokens), num(u.cache_creation_input_tokens), num(u.output_tokens), num(rec.num_turns)];
        const prev = claude.seen.get(s) ?? { cost: 0, usage: [0, 0, 0, 0, 0] };
        const d = totals.map((t, i) => Math.max(0, t - prev.usage[i]!));
        const cost = typeof rec.total_cost_usd === "number" ? rec.total_cost_usd : undefined;
        const delta = priced(fromExclusive(d[0]!, d[1]!, d[2]!, d[3]!), model, pricing(ctx), cost === undefined ? undefined : Math.max(0, cost - prev.cost));
        claude.seen.set(s, { cost: cost ?? prev.cost, usage: totals });
        ctx.usage({ ...delta, turns: Math.max(1, d[4]!), ...(model ? { model } : {}) });
        const subtype = str(rec.subtype) ?? "success";
        if (subtype === "success" && rec.is_error !== true) s.final = { ok: true };
        else {
          const why = subtype !== "success" ? subtype : "error";
          s.final = { ok: false, code: `agent_${why}`.replace(/^agent_error_/, "agent_"), message: `claude reported ${why}: ${oneLine(str(rec.result) ?? arr(rec.errors).join("; ") ?? "")}` };
        }
        return true;
      }
    }
  },
};
