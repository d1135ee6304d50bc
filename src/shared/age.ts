/**
 * Ages typed by users: `90m`, `2h`, `7d`, `2w` (also `30s`, and decimals
 * such as `1.5h`), for `runs --since`, `gc --older-than` and the retention
 * setting. One parser, so the three accept the same text.
 */

const AGE_UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** The age in milliseconds, or undefined when `text` is not one. */
export function parseAge(text: string): number | undefined {
  const age = /^(\d+(?:\.\d+)?)([smhdw])$/.exec(text.trim());
  return age ? Number(age[1]) * AGE_UNITS[age[2]!]! : undefined;
}

export const AGE_EXAMPLES = "90m, 12h, 30d or 2w";
