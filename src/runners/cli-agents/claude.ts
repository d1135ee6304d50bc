/**
 * The Claude Code adapter (`claude` runner): its flags, its records mapped
 * onto ours, its final event. See adapters.ts and docs/design/runners.md ("Verified
 * against the real CLIs"; tested with @anthropic-ai/claude-code 2.1.197 and 2.1.332).
 *
 * `claude -p --output-format stream-json --verbose --input-format stream-json --session-id <uuid>`:
 * the prompt and every later user turn are JSON lines on stdin (so a prompt
 * of any size works; argv is capped near 128 KiB). Messages written
 * mid-turn are taken after the current tool call (best effort); interrupt
 * is a control_request, answered by a `result` of subtype
 * error_during_execution that is not the stage's end when a message
 * follows it. A later process resumes the session with `--resume <id>`.
 *
 * Usage: each `result` carries `modelUsage[model]` and `total_cost_usd`
 * as running totals, while `result.usage` and `num_turns` cover the last
 * user turn only and `usage` is all zeros after Claude's non-streaming
 * fallback. So tokens and cost are taken from modelUsage as deltas against
 * the last result of the same process (per model: Claude also calls small
 * models for side tasks); `result.usage` only when modelUsage is missing.
 * A cost claude guessed for a model it has no price for is not taken
 * (knowsPrice).
 * Where the totals start differs by version: up to 2.1.276 at 0 in every
 * process; from 2.1.277 a `--resume`d or forked process starts at the
 * resumed session's totals. The adapter does not go by the version: a
 * result that says what it added (`model_usage_since_last_result`, 2.1.332)
 * is taken as it is; otherwise the first result of each process shows
 * which (carriesSession), and the session's totals before it are the ones
 * the continued stage left (session-totals.ts).
 *
 * Tools: atomic's names map to Claude's own (TOOL_MAP); `--tools` makes
 * exactly those available and `--allowedTools` lets them run without a
 * permission prompt; `tools: []` is `--tools ""` (none). A tool Claude
 * refused (`permission_denials`) is a warning on the stage. The run tools
 * (message, ask_agent, reply) are the stage MCP server's
 * (stage-mcp-config.ts), allowed as mcp__atomic__<tool>.
 *
 * Traces: with atomic's traces on (the stage has a TRACEPARENT), claude's
 * own OpenTelemetry traces are turned on too (`claudeTraceEnv`): its
 * `claude_code.interaction` span continues the TRACEPARENT it is given
 * (claude -p does), under the stage's span, and goes to the same OTLP
 * endpoint (the OTEL_EXPORTER_OTLP_* variables pass through; the header
 * variables, credentials kept from stages, are added back for claude
 * alone: otlp-headers.ts).
 */

import { classifyHttpError } from "../openai/provider-errors.ts";
import { fromExclusive, priced, usdToMicro } from "../usage.ts";
import type { AdapterContext, CliAdapter } from "./cli-runner.ts";
import { num, str, obj, arr, pricing, oneLine, warnRefusedTool, type Rec } from "./records.ts";
import { minus, plus, restarted, type Totals } from "./session-totals.ts";
import { STAGE_MCP_TOOLS } from "../run-tools.ts";
import { STAGE_MCP_NAME, claudeMcpConfig, stageMcpServer } from "./stage-mcp-config.ts";
import { otlpHeaderEnv } from "./otlp-headers.ts";
import { claudeSessions } from "./claude-sessions.ts";

/** atomic's tool names -> Claude Code's ("list" is Glob: Claude has no directory-listing tool of its own). Other names pass through unchanged. */
export const TOOL_MAP: Readonly<Record<string, string>> = { read: "Read", write: "Write", edit: "Edit", list: "Glob", grep: "Grep", bash: "Bash" };

const userLine = (message: string) => JSON.stringify({ type: "user", message: { role: "user", content: message } });

/** Claude names the context-window variant of a model in brackets ("claude-opus-4-8[1m]"); prices are per model. */
const modelName = (key: string) => key.replace(/\[[^\]]*\]$/, "");

/**
 * Claude Code's settings for exporting its spans (its "enhanced telemetry" beta traces), each only where the
 * stage's environment does not set it already; none when atomic's traces are off.
 */
export function claudeTraceEnv(base: Readonly<Record<string, string>>): Record<string, string> {
  if (!base.TRACEPARENT) return {};
  const wanted: Record<string, string> = {
    CLAUDE_CODE_ENABLE_TELEMETRY: "1",
    CLAUDE_CODE_ENHANCED_TELEMETRY_BETA: "1",
    OTEL_TRACES_EXPORTER: "otlp",
    ...(base.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ? {} : { OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" }),
    ...otlpHeaderEnv(base.TRACEPARENT),
  };
  return Object.fromEntries(Object.entries(wanted).filter(([k]) => base[k] === undefined));
}

export const claude: CliAdapter = {
  kind: "claude",
  env: (_req, base) => claudeTraceEnv(base),
  sessionStore: claudeSessions,
  credentials: ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"],
  delivery: "stream",
  assignsSession: true,
  nativeSchema: true,
  canFork: true,
  args(req, a) {
    const args = ["-p", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json"];
    args.push(a.resume ? "--resume" : "--session-id", a.sessionId!);
    // A fork gets a new session id from claude (its init record says which).
    if (a.fork) args.push("--fork-session");
    if (req.model) args.push("--model", req.model);
    // Run tools (message, ask_agent, reply) come from the stage MCP server, not from claude's own tools.
    const mcp = stageMcpServer(req);
    const tools = req.agent?.tools?.filter((t) => !(STAGE_MCP_TOOLS as readonly string[]).includes(t));
    if (tools) {
      const names = [...new Set(tools.map((t) => TOOL_MAP[t] ?? t))];
      const allowed = [...names, ...(mcp?.tools.map((t) => `mcp__${STAGE_MCP_NAME}__${t}`) ?? [])];
      args.push("--tools", names.join(","));
      if (allowed.length) args.push("--allowedTools", allowed.join(","));
    }
    if (mcp) args.push("--mcp-config", claudeMcpConfig(req, mcp));
    if (req.agent?.maxTurns) args.push("--max-turns", String(req.agent.maxTurns));
    if (req.agent?.schema) args.push("--json-schema", JSON.stringify(req.agent.schema));
    if (req.agent?.system) args.push("--append-system-prompt", req.agent.system);
    return args;
  },
  userTurn: (message) => [userLine(message)],
  steer: (message) => [userLine(message)],
  interrupt: (message) => [
    JSON.stringify({ type: "control_request", request_id: `int-${crypto.randomUUID()}`, request: { subtype: "interrupt" } }),
    ...(message ? [userLine(message)] : []),
  ],
  onRecord(rec, ctx) {
    const s = ctx.state;
    switch (rec.type) {
      case "system":
        if (rec.subtype === "init") {
          s.sessionId = str(rec.session_id) ?? s.sessionId;
          s.model = str(rec.model) ? modelName(str(rec.model)!) : s.model;
        } else if (rec.subtype === "api_retry") {
          s.process.lastRetry = rec;
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
      case "result":
        onResult(rec, ctx);
        return true;
    }
  },
};

function onResult(rec: Rec, ctx: AdapterContext): void {
  const s = ctx.state;
  s.sessionId = str(rec.session_id) ?? s.sessionId;
  s.text = str(rec.result) ?? s.text;
  if (rec.structured_output !== undefined) s.structured = rec.structured_output;
  recordUsage(rec, ctx);
  for (const d of arr(rec.permission_denials)) {
    const denial = obj(d);
    const name = str(denial.tool_name) ?? "?";
    // Names atomic does not map pass to --tools unchanged, so Claude's own name allows it too.
    const ours = Object.keys(TOOL_MAP).find((k) => TOOL_MAP[k] === name) ?? name;
    warnRefusedTool(ctx, "claude", name, denial.tool_input ?? {}, ours);
  }
  const subtype = str(rec.subtype) ?? "success";
  if (subtype === "success" && rec.is_error !== true) {
    s.final = { ok: true };
    return;
  }
  const words = oneLine(str(rec.result) ?? arr(rec.errors).map(String).join("; "));
  const status = num(rec.api_error_status);
  if (status >= 400) {
    const err = classifyHttpError(status, words, new Headers(), s.model ?? ctx.request.model);
    const retry = obj(s.process.lastRetry);
    const retried = num(retry.attempt) ? `; claude retried ${num(retry.attempt)} time(s)${num(retry.retry_delay_ms) ? `, the last after ${Math.round(num(retry.retry_delay_ms))} ms` : ""}` : "";
    s.final = { ok: false, code: err.code, message: `${err.message}${retried}` };
    return;
  }
  s.final = { ok: false, code: "agent_error", message: `claude reported ${subtype === "success" ? "an error" : subtype}${words ? `: ${words}` : ""}` };
}

/** Adds what this result adds to the running totals (see the header). */
function recordUsage(rec: Rec, ctx: AdapterContext): void {
  const s = ctx.state;
  const turns = Math.max(1, num(rec.num_turns));
  const models = Object.entries(obj(rec.modelUsage));
  if (!models.length) {
    const u = obj(rec.usage);
    const tokens = [num(u.input_tokens), num(u.cache_read_input_tokens), num(u.cache_creation_input_tokens), num(u.output_tokens)];
    const before = num(s.process.costMicro);
    const now = typeof rec.total_cost_usd === "number" ? usdToMicro(rec.total_cost_usd) : undefined;
    const cost = now === undefined ? undefined : Math.max(0, now - before) / 1_000_000;
    if (now !== undefined) s.process.costMicro = now;
    report(ctx, s.model ?? ctx.request.model, tokens, cost, turns);
    return;
  }
  // Cost in micro-dollars before the difference: sums of the deltas stay exact.
  const figures = (m: Rec) => [num(m.inputTokens), num(m.cacheReadInputTokens), num(m.cacheCreationInputTokens), num(m.outputTokens), usdToMicro(num(m.costUSD))];
  const own = rec.model_usage_since_last_result;
  let added: [string, Rec, number[]][];
  if (typeof own === "object" && own !== null && !Array.isArray(own)) {
    // What this result added, as claude counts it (2.1.332): no totals from before the process are needed.
    added = Object.entries(own).map(([key, m]) => [key, obj(m), figures(obj(m))]);
    s.process.modelUsage = Object.fromEntries(models.map(([key, m]) => [key, figures(obj(m))]));
    if (!added.length) added = [[s.model ?? models[0]![0], {}, [0, 0, 0, 0, 0]]];
  } else {
    // The process's first result says whether its totals went on from the resumed session's (the header).
    const prev = (s.process.modelUsage ??= carriesSession(rec, models, figures, ctx) ? structuredClone(s.session) : {}) as Totals;
    added = models.map(([key, value]) => {
      const now = figures(obj(value));
      const d = minus(now, prev[key]);
      prev[key] = now;
      return [key, obj(value), d];
    });
  }
  added.forEach(([key, m, d], i) => {
    s.session[key] = plus(s.session[key], d);
    if (d.every((x) => x === 0) && i > 0) return;
    report(ctx, modelName(key), d.slice(0, 4), knowsPrice(m) ? d[4]! / 1_000_000 : undefined, i === 0 ? turns : 0);
  });
}

/**
 * Whether claude's `costUSD` for a model is a price it knows. For a model
 * missing from its table claude still reports a cost, at its default model's
 * prices: 2.1.332 marks that figure `costBasis: "unknown"` (a known price is
 * "list"); then the config's price table prices the tokens, or the stage is
 * marked unpriced, never charged a guess. 2.1.197 says nothing of the kind,
 * so its guess is taken as reported (docs/design/runners.md).
 */
const knowsPrice = (m: Rec) => typeof m.costUSD === "number" && m.costBasis !== "unknown";

/**
 * Whether this (first) result's modelUsage starts from the session's totals
 * before the process (Claude Code from 2.1.277 on --resume and
 * --fork-session) rather than from 0 (before it). `result.usage` is the last
 * user turn's own count: the main model's total less it is what the process
 * carried over. When that count is all zeros (Claude's non-streaming
 * fallback) the totals tell: a count that restarted is below the session's.
 */
function carriesSession(rec: Rec, models: [string, unknown][], figures: (m: Rec) => number[], ctx: AdapterContext): boolean {
  const before = ctx.state.session;
  const known = models.filter(([key]) => before[key]?.some((x) => x > 0));
  if (!known.length) return false;
  const u = obj(rec.usage);
  const turn = [num(u.input_tokens), num(u.cache_read_input_tokens), num(u.cache_creation_input_tokens), num(u.output_tokens)];
  const main = known.find(([key]) => modelName(key) === ctx.state.model) ?? known[0]!;
  const base = before[main[0]]!.slice(0, 4);
  if (turn.some((x) => x > 0)) return minus(figures(obj(main[1])).slice(0, 4), turn).every((x, i) => x >= base[i]!);
  return known.every(([key, m]) => !restarted(figures(obj(m)), before[key]));
}

function report(ctx: AdapterContext, model: string | undefined, [input, cacheRead, cacheWrite, output]: number[], costUsd: number | undefined, turns: number): void {
  const u = priced(fromExclusive(input!, cacheRead!, cacheWrite!, output!), model, pricing(ctx), costUsd);
  ctx.usage({ ...u, turns, ...(model ? { model } : {}) });
}
