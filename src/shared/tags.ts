/**
 * Run tags: `key=value` labels on a root run (`atomic run --tag`,
 * `ctx.tag`), shown by `runs`, `show` and the page and filtered on. What a
 * tag may be is checked here, once, for every place that takes one: a key
 * of letters, digits and `_ . - /` starting with a letter or digit (at most
 * 64 characters), a value of at most 256 printable characters. A run has at
 * most 32 tags.
 */

import { UsageError } from "./errors.ts";

export const MAX_TAGS = 32;
const KEY = /^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,63}$/;
const MAX_VALUE = 256;

/** Why `key`/`value` is not a tag, or undefined when it is. */
export function tagProblem(key: unknown, value: unknown): string | undefined {
  if (typeof key !== "string" || !KEY.test(key)) {
    return `tag key ${JSON.stringify(key)} must be 1 to 64 letters, digits or _ . - / starting with a letter or digit`;
  }
  if (typeof value !== "string") return `tag ${key}'s value must be a string, got ${typeof value}`;
  if (value.length > MAX_VALUE) return `tag ${key}'s value is ${value.length} characters long; at most ${MAX_VALUE} are kept`;
  if (/[\u0000-\u001f\u007f]/.test(value)) return `tag ${key}'s value has a control character (a newline or tab?)`;
  return undefined;
}

/** `KEY=VALUE` texts (a flag given several times) as tags; a UsageError naming the flag for a bad one. */
export function parseTagPairs(pairs: readonly string[], flag = "--tag"): Record<string, string> {
  const tags: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new UsageError("bad_tag", `${flag} ${JSON.stringify(pair)} is not KEY=VALUE`, { hint: `for example ${flag} team=search` });
    const key = pair.slice(0, eq);
    const value = pair.slice(eq + 1);
    const problem = tagProblem(key, value);
    if (problem) throw new UsageError("bad_tag", `${flag} ${JSON.stringify(pair)}: ${problem}`, { hint: `for example ${flag} team=search` });
    tags[key] = value;
  }
  if (Object.keys(tags).length > MAX_TAGS) throw new UsageError("too_many_tags", `a run has at most ${MAX_TAGS} tags, got ${Object.keys(tags).length}`, { hint: "keep the ones you filter on" });
  return tags;
}
