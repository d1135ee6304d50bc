/**
 * Small readers shared by the CLI adapters: the agents' JSON records are
 * read field by field, and unknown or mistyped fields are ignored, never
 * fatal (these CLIs change quickly; RUNNERS.md).
 */

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
