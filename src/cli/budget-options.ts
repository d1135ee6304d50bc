/**
 * `--max-cost USD`, `--max-tokens N`, `--max-duration D` for `run` and
 * `resume`: the run's budget (over the workflow's and config's; a resume's
 * flags override what the run recorded). D is a number with a unit (500ms,
 * 90s, 15m, 2h) or plain seconds.
 */

import type { BudgetOptions, WorkflowDefinition } from "../sdk/types.ts";
import { UsageError } from "../shared/errors.ts";
import { defaultRunner, unpricedReason } from "../runners/agent-setup.ts";
import type { AtomicConfig } from "../shared/config/schema.ts";
import type { CliSession } from "./session.ts";

export const BUDGET_ARGS = {
  maxCost: { type: "string", description: "budget: at most this many US dollars (the run ends blocked when used up)" },
  maxTokens: { type: "string", description: "budget: at most this many tokens (input + output + cache)" },
  maxDuration: { type: "string", description: "budget: wall time of this run or resume (90s, 15m, 2h)" },
} as const;

export function budgetOption(args: { maxCost?: string | undefined; maxTokens?: string | undefined; maxDuration?: string | undefined }): BudgetOptions | undefined {
  const out: BudgetOptions = {};
  if (args.maxCost !== undefined) {
    const n = Number(args.maxCost.replace(/^\$/, ""));
    if (!Number.isFinite(n) || n < 0 || args.maxCost.trim() === "") {
      throw new UsageError("bad_flag", `--max-cost must be an amount of US dollars, got ${JSON.stringify(args.maxCost)}`, { hint: "for example --max-cost 2.50" });
    }
    out.maxCostUsd = n;
  }
  if (args.maxTokens !== undefined) {
    const n = Number(args.maxTokens.replace(/_/g, ""));
    if (!Number.isInteger(n) || n < 0) {
      throw new UsageError("bad_flag", `--max-tokens must be a whole number, got ${JSON.stringify(args.maxTokens)}`, { hint: "for example --max-tokens 200000" });
    }
    out.maxTokens = n;
  }
  if (args.maxDuration !== undefined) out.maxDurationMs = parseDuration(args.maxDuration);
  return Object.keys(out).length ? out : undefined;
}

export function parseDuration(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(text);
  if (!m) {
    throw new UsageError("bad_flag", `--max-duration must be a duration like 90s, 15m or 2h, got ${JSON.stringify(text)}`, { hint: "for example --max-duration 30m" });
  }
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 }[(m[2] ?? "s") as "ms" | "s" | "m" | "h"];
  return Math.round(Number(m[1]) * unit);
}

/**
 * `--max-cost` with a workflow whose runner reports no cost and whose model
 * has no price: said at start, since such tokens count $0 against the
 * limit (a stage naming its own runner or model is not known until it runs).
 */
export function warnIfUnpriced(s: CliSession, config: AtomicConfig, definition: WorkflowDefinition, budget: BudgetOptions | undefined): void {
  if (budget?.maxCostUsd === undefined) return;
  const why = unpricedReason(config, defaultRunner(config, definition.runner), definition.model ?? config.model);
  if (why) s.warn(why);
}
