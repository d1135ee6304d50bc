/**
 * The five CLI agents' flags and event streams (see RUNNERS.md; these CLIs
 * change quickly, so unknown record types and fields are ignored, never
 * fatal). Each adapter maps its agent's records onto ours: session id,
 * assistant text, tool starts/ends, usage (normalized: usage.ts), and the
 * final event that decides success.
 *
 * | agent    | delivery | session          | usage semantics      | cost          |
 * |----------|----------|------------------|----------------------|---------------|
 * | claude   | stream   | --session-id     | input excludes cache | reported      |
 * | codex    | resume   | thread.started   | input includes cache | price table   |
 * | gemini   | resume   | init.session_id  | input includes cache | price table   |
 * | opencode | resume   | sessionID        | input excludes cache | reported      |
 * | pi       | stream   | --session-id     | input excludes cache | reported      |
 */

import type { StageRequest } from "../types.ts";
import { fromExclusive, fromInclusive, priced } from "../usage.ts";
import type { AdapterContext, ArgsContext, CliAdapter } from "./cli-runner.ts";

type Rec = Record<string, unknown>;

const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);
const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
const obj = (v: unknown): Rec => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Rec) : {});
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

/** opencode and pi talk to whichever provider their config names: every provider key (not the journal's or the status token). */
const PROVIDER_KEYS = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY"] as const;

function pricing(ctx: AdapterContext) {
  return ctx.request.agent?.pricing;
}

// ---------------------------------------------------------------- Claude Code

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

// ---------------------------------------------------------------- Codex

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

// ---------------------------------------------------------------- Gemini CLI

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

// ---------------------------------------------------------------- opencode

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

// ---------------------------------------------------------------- pi

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

function oneLine(text: string): string {
  const t = text.replace(/\s+/g, " ").trim();
  return t.length > 300 ? `${t.slice(0, 300)}…` : t;
}

export const ADAPTERS: readonly CliAdapter[] = [claude, codex, gemini, opencode, pi];

export type { StageRequest, ArgsContext };
