/**
 * A table that fits the terminal: columns as wide as their widest cell,
 * two spaces apart, the last one unpadded. When the lines would be wider
 * than the terminal, columns marked `drop` go first (highest first), then
 * `shrink` columns are elided down to their `min` width ("review-and-…"),
 * and what is still too wide is cut at the edge with "…".
 *
 * The width is `COLUMNS` when set (what shells export, and what a user sets
 * to ask for a width), else the terminal's; off a terminal without COLUMNS
 * lines are never cut (a pipe or a file gets everything).
 */

import type { Style } from "./style.ts";
import { readEnv, type EnvSource } from "../shared/config/environment.ts";

export interface Column {
  header: string;
  /** Plain text, one per row (colour is applied after fitting). */
  cells: string[];
  /** Dropped when the table is too wide; a higher number goes first. */
  drop?: number;
  /** Elided with "…" down to `min` characters before anything is cut. */
  shrink?: { min: number };
  /** Colour of a row's cell. */
  color?: (row: number, text: string) => string;
}

export function terminalWidth(env?: EnvSource, stdout = process.stdout): number | undefined {
  const columns = readEnv("COLUMNS", env);
  const fromEnv = Number(columns);
  if (columns && Number.isInteger(fromEnv) && fromEnv > 0) return fromEnv;
  return stdout.isTTY && stdout.columns > 0 ? stdout.columns : undefined;
}

const GAP = 2;

export function elide(text: string, width: number): string {
  if (text.length <= width) return text;
  return width <= 1 ? text.slice(0, width) : `${text.slice(0, width - 1)}…`;
}

export function renderTable(columns: Column[], style: Style, width = terminalWidth()): string[] {
  let cols = columns.map((c) => ({ ...c, width: Math.max(c.header.length, ...c.cells.map((x) => x.length)) }));
  const total = (shrunk = false) =>
    cols.reduce((n, c) => n + (shrunk && c.shrink ? Math.min(c.width, c.shrink.min) : c.width), 0) + GAP * (cols.length - 1);
  if (width !== undefined) {
    // Drop only what eliding cannot make room for.
    while (total(true) > width) {
      const victim = cols.filter((c) => c.drop !== undefined).sort((a, b) => b.drop! - a.drop!)[0];
      if (!victim) break;
      cols = cols.filter((c) => c !== victim);
    }
    for (const c of cols) {
      const over = total() - width;
      if (over > 0 && c.shrink) c.width = Math.max(c.shrink.min, c.width - over);
    }
  }
  const rows = columns[0]?.cells.length ?? 0;
  const line = (cell: (c: (typeof cols)[number], i: number) => string, paint: (c: (typeof cols)[number], text: string) => string) => {
    let used = 0;
    const parts: string[] = [];
    cols.forEach((c, i) => {
      const last = i === cols.length - 1;
      const room = width === undefined ? Infinity : width - used;
      if (room <= 0) return;
      let text = elide(cell(c, i), c.width);
      if (!last) text = text.padEnd(c.width);
      if (text.length > room) text = elide(text.trimEnd(), room);
      parts.push(paint(c, text));
      used += text.length + GAP;
    });
    return parts.join(" ".repeat(GAP)).trimEnd();
  };
  const out = [style.dim(line((c) => c.header, (_c, t) => t))];
  for (let r = 0; r < rows; r++) out.push(line((c) => c.cells[r]!, (c, t) => (c.color ? c.color(r, t) : t)));
  return out;
}
