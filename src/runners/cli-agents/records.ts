/**
 * Small readers shared by the CLI adapters: the agents' JSON records are
 * read field by field, and unknown or mistyped fields are ignored, never
 * fatal (these CLIs change quickly; docs/design/runners.md).
 */

import { classifyHttpError } from "../openai/provider-errors.ts";
import type { AdapterContext } from "./cli-runner.ts";

export type Rec = Record<string, unknown>;

export const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);
export const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
export const obj = (v: unknown): Rec => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Rec) : {});
export const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

/** opencode and pi talk to whichever provider their config names: every provider key (not the journal's or the status token). */
export const PROVIDER_KEYS = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY"] as const;

export function pricing(ctx: AdapterContext) {
  return ctx.request.agent?.pricing;
}

export function oneLine(text: string): string {
  const t = text.replace(/\s+/g, " ").trim();
  return t.length > 300 ? `${t.slice(0, 300)}…` : t;
}

/** atomic's tool names (the openai runner's), which a stage's `tools` option uses for every runner. */
export const ATOMIC_TOOLS = ["read", "write", "edit", "list", "grep", "bash"] as const;

/**
 * A tool call the CLI refused, as a warning on the stage (its transcript,
 * its result, `atomic show`): the CLI's name for the tool, the arguments
 * the model gave (when the CLI still reports them), the CLI's reason, and
 * how to allow it. `ours` is atomic's name for the tool, when it has one
 * (then naming it in the stage's `tools` allows it); without one the CLI
 * has no such tool to allow.
 */
export function warnRefusedTool(ctx: AdapterContext, cli: string, name: string, input: unknown, ours: string | undefined, why?: string): void {
  const args = input === undefined ? "" : ` (${oneLine(JSON.stringify(input))})`;
  const hint = ours
    ? `name it in the stage's tools to allow it, e.g. tools: ${JSON.stringify([...new Set([...(ctx.request.agent?.tools ?? []), ours])])}`
    : `${cli} has no tool of that name that a stage's tools could allow`;
  ctx.warn(`${cli} refused the tool ${name}${args}${why ? `: ${oneLine(why)}` : ""}; hint: ${hint}`);
}

/**
 * A provider error the CLI reported (its HTTP status, the provider's body or
 * words, its headers), classified with the openai runner's table
 * (openai/provider-errors.ts) so every runner fails with the same codes. No
 * status: the CLI's own error (agent_error), in its words.
 */
export function cliProviderError(
  cli: string,
  status: number | undefined,
  said: string,
  headers: Record<string, string> = {},
  model?: string,
): { ok: false; code: string; message: string; retryAfterMs?: number } {
  if (status === undefined || !Number.isInteger(status) || status < 400) return { ok: false, code: "agent_error", message: `${cli} reported an error: ${oneLine(said) || "(no message)"}` };
  const e = classifyHttpError(status, said, new Headers(headers), model);
  return { ok: false, code: e.code, message: `${cli}: ${e.message}`, ...(e.retryAfterMs !== undefined ? { retryAfterMs: e.retryAfterMs } : {}) };
}

/**
 * The cost opencode or pi reported for a call, in USD; undefined (priced
 * from atomic's own table, else marked unpriced) when it is 0: they report
 * 0 for a model their config gives no price, which is not "free".
 */
export function reportedCost(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) && v > 0 ? v : undefined;
}
