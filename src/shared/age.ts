/**
 * Ages typed by users: `90m`, `2h`, `7d`, `2w` (also `30s`, and decimals
 * such as `1.5h`), for `runs --since`, `gc --older-than` and the retention
 * setting. One parser, so the three accept the same text. And points in
 * time typed the same way (`runs --since`, the status API's `since` and
 * `until`): an age back from now, or an ISO date or date-time.
 */

const AGE_UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** The age in milliseconds, or undefined when `text` is not one. */
export function parseAge(text: string): number | undefined {
  const age = /^(\d+(?:\.\d+)?)([smhdw])$/.exec(text.trim());
  return age ? Number(age[1]) * AGE_UNITS[age[2]!]! : undefined;
}

export const AGE_EXAMPLES = "90m, 12h, 30d or 2w";

const ISO = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?)?$/;

/**
 * A point in time (ms since the epoch): an age (`2h`: two hours before
 * `now`) or an ISO date (midnight UTC) or date-time; undefined when `text`
 * is neither.
 */
export function parseInstant(text: string, now = Date.now()): number | undefined {
  const age = parseAge(text);
  if (age !== undefined) return now - age;
  const at = ISO.test(text.trim()) ? Date.parse(text.trim().replace(" ", "T")) : NaN;
  return Number.isNaN(at) ? undefined : at;
}

export const INSTANT_EXAMPLES = "an ISO date or time (2026-12-01, 2026-12-01T09:30Z) or an age like 90m, 2h, 7d";
