/**
 * A CLI session's usage so far, as the CLI counts it, handed from a stage to
 * the stage that continues or forks it (docs/design/runners.md, "Usage
 * through sessions").
 *
 * Some CLIs report usage as running totals, and some of those keep counting
 * across processes: codex's `turn.completed.usage` is the thread's total
 * across `exec resume` and `exec fork`; Claude Code from 2.1.277 starts a
 * `--resume`d (or forked) process at the resumed session's `modelUsage` and
 * `total_cost_usd`. A stage that continues such a session must take its
 * figures as differences from the session's totals when the earlier stage
 * ended, not from zero, or it is charged the earlier stages' calls again.
 *
 * So each CLI stage leaves, beside its transcript, `session-usage.json`: per
 * key (a model for claude, the thread for codex) the session's totals in
 * the CLI's own figures (tokens, and micro-dollars where the CLI reports
 * money), as the stage last saw them. The stage that continues it
 * (`continueFrom`, whose artifact directory is the earlier attempt's) reads
 * them; the adapter decides from the CLI's own events whether the new
 * process's figures include them (claude.ts, codex.ts).
 */

import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SESSION_USAGE_FILE } from "../../artifacts/stage-logs.ts";

/** Per key, the figures in the adapter's order (e.g. input, cache read, cache write, output, cost in micro-dollars). */
export type Totals = Record<string, number[]>;

/** The totals an earlier attempt left (none: it left no file, or one this version cannot read). */
export function readTotals(artifactDir: string | undefined): Totals {
  if (!artifactDir) return {};
  const file = join(artifactDir, SESSION_USAGE_FILE);
  if (!existsSync(file)) return {};
  try {
    const parsed = JSON.parse(readFileSync(file, "utf8")) as unknown;
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return {};
    const out: Totals = {};
    for (const [key, value] of Object.entries(parsed)) {
      if (Array.isArray(value) && value.every((n) => typeof n === "number" && Number.isFinite(n) && n >= 0)) out[key] = value;
    }
    return out;
  } catch {
    return {};
  }
}

export function writeTotals(artifactDir: string, totals: Totals): void {
  if (!Object.keys(totals).length) return;
  mkdirSync(artifactDir, { recursive: true });
  writeFileSync(join(artifactDir, SESSION_USAGE_FILE), JSON.stringify(totals));
}

/** now − before, field by field, never below 0. */
export function minus(now: readonly number[], before: readonly number[] | undefined): number[] {
  return now.map((x, i) => Math.max(0, x - (before?.[i] ?? 0)));
}

/** a + b, field by field. */
export function plus(a: readonly number[] | undefined, b: readonly number[]): number[] {
  return b.map((x, i) => x + (a?.[i] ?? 0));
}

/** Some field of `now` is below `before`'s: a count that restarted, not one that went on from `before`. */
export function restarted(now: readonly number[], before: readonly number[] | undefined): boolean {
  return before !== undefined && now.some((x, i) => x < (before[i] ?? 0));
}
