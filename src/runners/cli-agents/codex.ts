/**
 * The Codex adapter (`codex` runner, verified with codex 0.171.0): its
 * flags, its records mapped onto ours, its final event. See adapters.ts and
 * docs/design/runners.md ("Verified against the real CLIs").
 *
 * - `codex exec --json -C DIR -s SANDBOX --skip-git-repo-check [-m M] [--output-schema F] -`;
 *   a resume puts the options BEFORE `resume`: `codex exec --json … resume ID -`
 *   (after it, codex exits 2). The prompt is read from stdin (`-`).
 * - No input while running: messages are queued and delivered by resuming.
 * - `turn.completed.usage` is a running total for the thread, across
 *   `exec resume` and `exec fork` (a fork's count goes on from its parent's):
 *   the stage records the difference from the thread's last total, its own
 *   or, for its first turn, the one the continued stage left
 *   (session-totals.ts), or, when that stage left none here (it ran on
 *   another worker host), the one codex's session file shows
 *   (codex-rollout.ts). A total below the last one is a count that
 *   restarted and is taken whole. input_tokens includes cached and
 *   cache-written tokens.
 * - `error` records are not final ("Reconnecting... 1/5" comes before
 *   codex's own retry); `turn.failed` is, and its message is classified
 *   (agent-errors.ts).
 * - The model: the stage's, else the `model` of codex's config.toml
 *   ($CODEX_HOME, else ~/.codex), so the stage is priced (or marked
 *   unpriced, never a silent $0).
 * - Tools: codex has no per-tool switch, and it reads, lists, greps and
 *   edits through its one shell tool (`exec_command`). So `tools` maps to
 *   the sandbox: without write, edit or bash it is read-only
 *   (`-s read-only`), else workspace-write; `tools: []` switches the shell
 *   and codex's other tools off (NO_TOOLS), leaving a model that can only
 *   answer. codex denies no tool call itself: in the read-only sandbox a
 *   command that writes fails ("Read-only file system"), which is a warning
 *   on the stage naming the command (when codex reports the command: under
 *   load codex 0.171 sometimes emits no item for a command that ends at
 *   once, and then there is nothing to warn about); with `tools: []` a call of the shell
 *   is answered "unsupported call: exec_command" to the model and reported
 *   in no event of `--json`, so nothing can be said about it.
 * - Run tools (message, ask_agent, reply): the stage MCP server, added by
 *   `-c mcp_servers.atomic.*` overrides (stage-mcp-config.ts) with its link
 *   in codex's environment; codex offers them to the model as the
 *   namespace `mcp__atomic` and reports each call as an mcp_tool_call item.
 * - Inside atomic's sandbox (docs/design/sandbox.md) codex runs with its own
 *   sandbox off (`-s danger-full-access`): nested, it needs a helper binary
 *   it may not create everywhere; atomic's sandbox confines the shell tool
 *   instead, with the cwd read-only for read-only tools (the same
 *   "Read-only file system", the same warning).
 * - Traces: with atomic's traces on (the stage has a TRACEPARENT), codex
 *   sends its own spans to the same OTLP/HTTP traces endpoint
 *   (`-c otel.trace_exporter=…`, codexTraceArgs) and continues the
 *   TRACEPARENT it inherits, so they nest under the stage's span. The
 *   OTLP headers (an API key) go in codex's environment, not on its
 *   command line (otlp-headers.ts): codex's exporter reads
 *   OTEL_EXPORTER_OTLP_HEADERS itself and adds them to the endpoint's.
 *   codex's shell tool does not inherit them: their names join the
 *   `shell_environment_policy.exclude` of codex's config.toml (a `-c` of
 *   names, no values).
 */

import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { StageRequest } from "../types.ts";
import { fromInclusive, priced } from "../usage.ts";
import { agentFailure } from "./agent-errors.ts";
import type { CliAdapter } from "./cli-runner.ts";
import { num, str, obj, pricing, warnRefusedTool } from "./records.ts";
import { readEnv } from "../../shared/config/environment.ts";
import { codexMcpArgs, stageMcpServer } from "./stage-mcp-config.ts";
import { readOnly } from "./codex-tools.ts";
import { minus, restarted } from "./session-totals.ts";
import { codexSessions, totalsBeforeLastTurn } from "./codex-rollout.ts";
import { otlpHeaderEnv } from "./otlp-headers.ts";

const TOOL_ITEMS = new Set(["command_execution", "mcp_tool_call", "file_change", "web_search"]);
/** What a write in the read-only sandbox (Landlock, a read-only bind) says. */
const SANDBOX_REFUSED = /Read-only file system|Operation not permitted|Permission denied/;
/** `-c` overrides that leave codex no tool that acts (request_user_input stays: it has no user in exec mode). */
const NO_TOOLS = ["features.shell_tool=false", "features.unified_exec=false", 'web_search="disabled"', "features.multi_agent=false", "features.goals=false", "tools.view_image=false"].flatMap((c) => ["-c", c]);

/** codex's `otel.trace_exporter` for the OTLP endpoint atomic's traces go to (none when it has no http(s) endpoint). */
export function codexTraceArgs(): string[] {
  const traces = readEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")?.trim();
  const base = readEnv("OTEL_EXPORTER_OTLP_ENDPOINT")?.trim();
  const endpoint = traces || (base ? `${base.replace(/\/+$/, "")}/v1/traces` : undefined);
  if (!endpoint || !/^https?:\/\//.test(endpoint)) return [];
  const protocol = (readEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") ?? readEnv("OTEL_EXPORTER_OTLP_PROTOCOL"))?.trim() === "http/json" ? "json" : "binary";
  return ["-c", `otel.trace_exporter={otlp-http={endpoint=${JSON.stringify(endpoint)},protocol="${protocol}"}}`];
}

/** The running totals of the thread, in the order of `turn.completed.usage`'s fields we read. */
const TOTALS = ["input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens"] as const;

export const codex: CliAdapter = {
  kind: "codex",
  credentials: ["OPENAI_API_KEY", "CODEX_API_KEY"],
  delivery: "resume",
  assignsSession: false,
  nativeSchema: true,
  canFork: true,
  promptOnStdin: true,
  sessionStore: codexSessions,
  args(req, a) {
    const tools = req.agent?.tools;
    // Inside atomic's sandbox codex's own is off: atomic's walls (the cwd read-only for read-only tools) hold instead.
    const sandbox = req.sandbox ? "danger-full-access" : readOnly(req) ? "read-only" : "workspace-write";
    const flags = ["--json", "-C", req.cwd, "-s", sandbox, "--skip-git-repo-check"];
    if (tools?.length === 0) flags.push(...NO_TOOLS);
    if (req.model) flags.push("-m", req.model);
    if (a.schemaFile) flags.push("--output-schema", a.schemaFile);
    const mcp = stageMcpServer(req);
    if (mcp) flags.push(...codexMcpArgs(mcp));
    if (req.traceparent) flags.push(...codexTraceArgs(), ...shellExcludeArgs(req, Object.keys(otlpHeaderEnv(req.traceparent))));
    if (!a.resume || !a.sessionId) return ["exec", ...flags, "-"];
    // `exec fork` starts a new thread from the old one (thread.started names it), with the same option order as resume.
    return ["exec", ...flags, a.fork ? "fork" : "resume", a.sessionId, "-"];
  },
  env: (req) => ({ ...stageMcpServer(req)?.env, ...otlpHeaderEnv(req.traceparent) }),
  onRecord(rec, ctx) {
    const s = ctx.state;
    switch (rec.type) {
      case "thread.started":
        s.sessionId = str(rec.thread_id) ?? s.sessionId;
        return;
      case "item.started": {
        const item = obj(rec.item);
        if (TOOL_ITEMS.has(String(item.type))) ctx.tool(String(item.type), String(item.command ?? item.tool ?? item.query ?? ""));
        return;
      }
      case "item.completed": {
        const item = obj(rec.item);
        if (item.type === "agent_message" && typeof item.text === "string") {
          ctx.text(item.text);
          s.text = item.text;
        } else if (TOOL_ITEMS.has(String(item.type))) {
          ctx.tool(String(item.type), String(item.command ?? item.tool ?? item.query ?? ""), item.status !== "failed" && (item.type !== "command_execution" || num(item.exit_code) === 0));
          if (item.type === "command_execution" && readOnly(ctx.request) && SANDBOX_REFUSED.test(String(item.aggregated_output ?? ""))) {
            const why = SANDBOX_REFUSED.exec(String(item.aggregated_output))![0];
            warnRefusedTool(ctx, "codex", "exec_command", { cmd: item.command }, "write", `its read-only sandbox refused a write (${why})`);
          }
        }
        return;
      }
      case "turn.completed": {
        const u = obj(rec.usage);
        const totals = TOTALS.map((k) => num(u[k]));
        // The thread's totals before this turn: this stage's last, else the continued stage's (session-totals.ts),
        // else, for a continued thread whose earlier stage left none here, codex's own session file (codex-rollout.ts).
        const prev = s.session.thread ?? (ctx.request.continueFrom && s.sessionId ? totalsBeforeLastTurn(codexHome(ctx.request), s.sessionId, TOTALS) : undefined);
        s.session.thread = totals;
        // A count below the last one restarted (a codex that counts per process): it is this turn's own.
        const [input, cached, written, output] = (restarted(totals, prev) ? totals : minus(totals, prev)) as [number, number, number, number];
        const model = ctx.request.model ?? (s.memo.codexModel as string | undefined) ?? configuredModel(ctx.request);
        if (model) s.memo.codexModel = model;
        ctx.usage({ ...priced(fromInclusive(input, cached, output, written), model, pricing(ctx)), turns: 1, ...(model ? { model } : {}) });
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
        s.final = agentFailure("codex", str(obj(rec.error).message) ?? (s.memo.codexError as string | undefined) ?? JSON.stringify(rec.error ?? ""), { model: ctx.request.model });
        return true;
      case "error":
        // Not final: "Reconnecting... n/5" precedes codex's own retry; a real failure ends with turn.failed.
        s.memo.codexError = str(rec.message);
        ctx.emit({ type: "output", stream: "stderr", text: `codex: ${str(rec.message) ?? ""}\n` });
        return;
    }
  },
};


/** codex's home: the stage's CODEX_HOME, else atomic's, else ~/.codex. */
function codexHome(req: StageRequest): string {
  const env = req.env ?? {};
  return (typeof env.CODEX_HOME === "string" ? env.CODEX_HOME : undefined) ?? readEnv("CODEX_HOME") ?? join(homedir(), ".codex");
}

/** codex's config.toml, parsed; empty when there is none or it is not TOML (codex then says so itself). */
function codexConfig(req: StageRequest): Record<string, unknown> {
  try {
    return obj(Bun.TOML.parse(readFileSync(join(codexHome(req), "config.toml"), "utf8")));
  } catch {
    return {};
  }
}

/** The top-level `model = "…"` of codex's config.toml. */
function configuredModel(req: StageRequest): string | undefined {
  return str(codexConfig(req).model);
}

/** `-c` keeping `names` from the environment of codex's shell tool, besides what config.toml's `shell_environment_policy.exclude` keeps (a `-c` replaces the list). */
function shellExcludeArgs(req: StageRequest, names: string[]): string[] {
  if (names.length === 0) return [];
  const configured = obj(codexConfig(req).shell_environment_policy).exclude;
  const theirs = Array.isArray(configured) ? configured.filter((x): x is string => typeof x === "string") : [];
  return ["-c", `shell_environment_policy.exclude=${JSON.stringify([...theirs, ...names])}`];
}
