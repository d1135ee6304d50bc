/**
 * The usage ledger of a stage, and the normalizations that keep it honest.
 *
 * Our ledger: input (tokens that were not cache hits or writes), output,
 * cacheRead, cacheWrite, cost in integer micro-dollars, turns, model.
 * Providers disagree on what "input" means:
 * - OpenAI-style (chat completions, Codex, Gemini): prompt/input tokens
 *   INCLUDE cached ones, so input = prompt − cached, cacheRead = cached.
 * - Anthropic-style (Claude, pi, opencode): input EXCLUDES cache reads and
 *   writes, which are reported separately.
 * Getting this wrong counts cache twice; every adapter goes through one of
 * the two functions below.
 *
 * Cost: what the agent reports (USD, converted once to micro-dollars), or
 * priced from the config's table (USD per million tokens, so micro-dollars
 * = tokens × price), or marked `unpriced` with cost 0. Sums of integers are
 * exact, whatever the number of stages or workers.
 */

import type { Usage } from "../sdk/types.ts";
import { priceOf, type ModelPrice } from "../shared/config/schema.ts";

export function emptyUsage(model?: string): Usage {
  return { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, costMicroUsd: 0, turns: 0, ...(model ? { model } : {}) };
}

/** a + b, field by field; flags are sticky (one estimated turn makes the sum an estimate). */
export function addUsage(a: Usage, b: Partial<Usage>): Usage {
  const out: Usage = {
    inputTokens: a.inputTokens + int(b.inputTokens),
    outputTokens: a.outputTokens + int(b.outputTokens),
    cacheReadTokens: a.cacheReadTokens + int(b.cacheReadTokens),
    cacheWriteTokens: a.cacheWriteTokens + int(b.cacheWriteTokens),
    costMicroUsd: a.costMicroUsd + int(b.costMicroUsd),
    turns: a.turns + int(b.turns),
  };
  const model = b.model ?? a.model;
  if (model) out.model = model;
  if (a.estimated || b.estimated) out.estimated = true;
  if (a.unpriced || b.unpriced) out.unpriced = true;
  return out;
}

export function totalTokens(u: Partial<Usage>): number {
  return int(u.inputTokens) + int(u.outputTokens) + int(u.cacheReadTokens) + int(u.cacheWriteTokens);
}

export function usdToMicro(usd: number): number {
  return Number.isFinite(usd) && usd > 0 ? Math.round(usd * 1_000_000) : 0;
}

/** OpenAI-style counts (prompt includes cached). */
export function fromInclusive(prompt: number, cached: number, output: number, cacheWrite = 0): Partial<Usage> {
  const p = int(prompt);
  const c = Math.min(int(cached), p);
  const w = Math.min(int(cacheWrite), p - c);
  return { inputTokens: p - c - w, cacheReadTokens: c, cacheWriteTokens: w, outputTokens: int(output) };
}

/** Anthropic-style counts (input excludes cache reads and writes). */
export function fromExclusive(input: number, cacheRead: number, cacheWrite: number, output: number): Partial<Usage> {
  return { inputTokens: int(input), cacheReadTokens: int(cacheRead), cacheWriteTokens: int(cacheWrite), outputTokens: int(output) };
}

/**
 * Sets `costMicroUsd` from `reportedUsd` when the agent reported a cost,
 * else from the price table; marks the usage unpriced when neither is known.
 */
export function priced(u: Partial<Usage>, model: string | undefined, pricing: Record<string, ModelPrice> | undefined, reportedUsd?: number): Partial<Usage> {
  if (reportedUsd !== undefined && Number.isFinite(reportedUsd)) return { ...u, costMicroUsd: usdToMicro(reportedUsd) };
  const price = priceOf(pricing, model);
  if (!price) return { ...u, costMicroUsd: 0, ...(totalTokens(u) > 0 ? { unpriced: true } : {}) };
  const micro =
    int(u.inputTokens) * (price.inputPerMTok ?? 0) +
    int(u.outputTokens) * (price.outputPerMTok ?? 0) +
    int(u.cacheReadTokens) * (price.cacheReadPerMTok ?? price.inputPerMTok ?? 0) +
    int(u.cacheWriteTokens) * (price.cacheWritePerMTok ?? price.inputPerMTok ?? 0);
  return { ...u, costMicroUsd: Math.round(micro) };
}

/** A rough token count for text (about 4 characters a token), for providers that report none. */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / 4);
}

function int(n: number | undefined): number {
  return typeof n === "number" && Number.isFinite(n) && n > 0 ? Math.round(n) : 0;
}

/**
 * "$0.0123" for people; "unpriced" when tokens were spent at no known price
 * (no reported cost, no price table entry), "$0.02 (partly unpriced)" when
 * only some were. Where the flag is not kept (the run list sums the stage
 * index), tokens at a cost of exactly 0 read as unpriced.
 */
export function formatCost(u: Pick<Usage, "costMicroUsd"> & Partial<Omit<Usage, "costMicroUsd">> & { unpriced?: boolean | undefined }): string {
  const unpriced = u.unpriced ?? (u.costMicroUsd === 0 && totalTokens(u) > 0);
  if (unpriced && u.costMicroUsd === 0) return "unpriced";
  const usd = u.costMicroUsd / 1_000_000;
  const text = usd === 0 ? "$0" : usd < 0.01 ? `$${usd.toFixed(6).replace(/0+$/, "")}` : `$${usd.toFixed(4)}`;
  return unpriced ? `${text} (partly unpriced)` : text;
}
