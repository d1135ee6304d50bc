/**
 * Colours and symbols for terminal output, off when NO_COLOR is set, with
 * --no-color, or when stdout is not a terminal.
 */

export interface Style {
  enabled: boolean;
  red(s: string): string;
  green(s: string): string;
  yellow(s: string): string;
  blue(s: string): string;
  dim(s: string): string;
  bold(s: string): string;
}

export function makeStyle(enabled: boolean): Style {
  const wrap = (code: number, close: number) => (s: string) => (enabled ? `\x1b[${code}m${s}\x1b[${close}m` : s);
  return {
    enabled,
    red: wrap(31, 39),
    green: wrap(32, 39),
    yellow: wrap(33, 39),
    blue: wrap(34, 39),
    dim: wrap(2, 22),
    bold: wrap(1, 22),
  };
}

export function colorFor(style: Style, status: string): (s: string) => string {
  switch (status) {
    case "completed":
      return style.green;
    case "skipped":
    case "continued":
      return style.dim;
    case "failed":
    case "crashed":
      return style.red;
    case "running":
      return style.blue;
    case "interrupted":
    case "blocked":
    case "cancelled":
    case "awaiting_input":
      return style.yellow;
    default:
      return style.dim;
  }
}

export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, "0")}m`;
}

/** A time as every surface prints it (the status page's dom.js too): UTC, with the zone said, so that a time read on one machine means the same on another. */
export function formatTime(ms: number): string {
  return `${new Date(ms).toISOString().replace("T", " ").slice(0, 19)} UTC`;
}
