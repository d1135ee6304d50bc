/**
 * The console's lines as text (with the colours of cli/style.ts, or none):
 * a run of the list, a step of a run's tree, a run's heading. The same
 * words, symbols and helpers as `atomic runs --watch` and `atomic run`'s
 * live tree (status/totals.ts, view/tree-model.ts, runners/usage.ts).
 */

import { controlText } from "../../journal/run-control.ts";
import { formatCost } from "../../runners/usage.ts";
import { stageCountsText } from "../../status/totals.ts";
import type { RunSummary } from "../../status/summaries.ts";
import { colorFor, formatDuration, formatTime, type Style } from "../style.ts";
import { SYMBOL, compact } from "../view/tree-model.ts";
import type { StageRow } from "./console-data.ts";
import type { Usage } from "../../sdk/types.ts";

/** Fits `text` (no escapes) into `width` columns, with an ellipsis when cut. */
export function fit(text: string, width: number): string {
  if (width <= 0) return "";
  if (Bun.stringWidth(text) <= width) return text.padEnd(width - (Bun.stringWidth(text) - text.length));
  let out = "";
  for (const ch of text) {
    if (Bun.stringWidth(out + ch) > width - 1) break;
    out += ch;
  }
  return `${out}…`;
}

function usageText(u: Pick<Usage, "inputTokens" | "outputTokens" | "cacheReadTokens" | "cacheWriteTokens" | "costMicroUsd"> | null | undefined): string {
  if (!u) return "";
  const tokens = u.inputTokens + u.outputTokens + u.cacheReadTokens + u.cacheWriteTokens;
  return `${compact(tokens)} tok ${formatCost(u)}`;
}

/** Which columns of the run list fit in `width`: the time, stages and usage from 110 columns, the start from 140. */
function runColumns(width: number): { tail: boolean; started: boolean; workflow: number } {
  const tail = width >= 110;
  const started = width >= 140;
  const fixed = 18 + 1 + 14 + 1 + (started ? 24 : 0) + (tail ? 1 + 8 + 1 + 22 + 1 + 18 : 0);
  return { tail, started, workflow: Math.max(8, width - fixed) };
}

/** A run of the list in `width` columns: id, status, workflow, then start, duration, stages and usage where they fit. */
export function runLine(st: Style, r: RunSummary, width: number): string {
  const c = runColumns(width);
  const started = c.started ? ` ${formatTime(r.createdAt)}` : "";
  const tail = c.tail ? ` ${fit(formatDuration(r.durationMs), 8)} ${fit(stageCountsText(r.stages), 22)} ${fit(usageText(r.usage), 18)}` : "";
  return `${fit(r.id, 18)} ${colorFor(st, r.status)(fit(r.status, 14))} ${fit(r.workflow, c.workflow)}${started}${tail}`;
}

export function runsHeader(st: Style, width: number): string {
  const c = runColumns(width);
  const started = c.started ? ` ${"STARTED".padEnd(19)}` : "";
  const tail = c.tail ? ` ${"TIME".padEnd(8)} ${"STAGES".padEnd(22)} ${"USAGE".padEnd(18)}` : "";
  return st.dim(`${"RUN".padEnd(18)} ${"STATUS".padEnd(14)} ${"WORKFLOW".padEnd(c.workflow)}${started}${tail}`);
}

/** A run's heading: workflow, id, status, duration, stage counts, usage. */
export function runHeading(st: Style, r: RunSummary, width: number): string {
  const text = `${r.workflow} ${r.id} ${r.status} · ${formatDuration(r.durationMs)} · ${stageCountsText(r.stages)}${r.usage ? ` · ${usageText(r.usage)}` : ""}${r.control ? ` · ${controlText(r.control)}` : ""}`;
  const fitted = fit(text, width);
  return fitted.replace(r.status, colorFor(st, r.status)(r.status)).replace(r.workflow, st.bold(r.workflow));
}

/** A step of a run's tree: symbol, name (indented under its child run; "(paused)" when paused alone), status, elapsed, tokens and cost. */
export function stageLine(st: Style, row: StageRow, now: number, width: number, paused = false): string {
  const s = row.step;
  const sym = colorFor(st, s.status)(SYMBOL[s.status] ?? (s.status === "waiting" ? "…" : "•"));
  const label = `${"  ".repeat(row.depth)}${s.kind === "stage" ? s.name : `${s.kind} ${s.name}`}${paused ? " (paused)" : ""}`;
  const elapsed = s.startedAt === null || s.status === "queued" ? s.status : formatDuration((s.endedAt ?? now) - s.startedAt);
  const attempts = s.attempts > 1 ? ` ×${s.attempts}` : "";
  const right = `${elapsed}${attempts}${s.usage ? `  ${usageText(s.usage)}` : ""}`;
  const nameWidth = Math.max(6, width - 2 - right.length - 1);
  return `${sym} ${fit(label, nameWidth)} ${st.dim(right)}`;
}
