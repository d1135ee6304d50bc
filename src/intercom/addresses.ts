/**
 * Stage addresses: `<run-id>:<stage path>`.
 *
 * A stage path is the names from the root run down to the stage, joined by
 * "/": a stage "lint" of the root is `lint`; a stage "security" inside a
 * child workflow started as "review" is `review/security`. A path may be a
 * glob pattern: `*` matches within one name, `**` across names, `?` one
 * character, `[abc]` / `[a-z]` / `[!x]` one character of a set. Patterns
 * are compiled once to a regular expression anchored at both ends.
 */

import { UsageError } from "../shared/errors.ts";

const GLOB_CHARS = /[*?[]/;

/** True when the path is a pattern rather than one stage's path. */
export function isPattern(path: string): boolean {
  return GLOB_CHARS.test(path);
}

/** The literal part of a pattern before its first glob character (for a range lookup). */
export function literalPrefix(pattern: string): string {
  const i = pattern.search(GLOB_CHARS);
  return i < 0 ? pattern : pattern.slice(0, i);
}

/** Checks a stage path or pattern as a user typed it; returns it normalized (no leading/trailing "/"). */
export function parseStagePath(text: string): string {
  const path = text.trim().replace(/^\/+|\/+$/g, "");
  if (path === "") {
    throw new UsageError("bad_stage_path", "a stage path is required", { hint: 'name the stage, e.g. "review/security", or a pattern like "review/*"' });
  }
  if (path.length > 1000) throw new UsageError("bad_stage_path", "a stage path may be at most 1000 characters long");
  if (path.split("/").some((part) => part === "")) {
    throw new UsageError("bad_stage_path", `stage path ${JSON.stringify(text)} has an empty name between two "/"`, {
      hint: 'separate names with one "/", e.g. "review/security"',
    });
  }
  if (isPattern(path)) compileGlob(path);
  return path;
}

/**
 * Splits `<run>:<path>` (the address form intercom and `ctx.send` use).
 * Without a ":" the whole text is a path and `run` is undefined.
 */
export function splitAddress(address: string): { run: string | undefined; path: string } {
  const i = address.indexOf(":");
  if (i < 0) return { run: undefined, path: address };
  return { run: address.slice(0, i), path: address.slice(i + 1) };
}

const cache = new Map<string, RegExp>();

export function compileGlob(pattern: string): RegExp {
  const hit = cache.get(pattern);
  if (hit) return hit;
  let re = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "*") {
      if (pattern[i + 1] === "*") {
        // "**/" also matches nothing at all: review/**/x matches review/x.
        if (pattern[i + 2] === "/") {
          re += "(?:.*/)?";
          i += 2;
        } else {
          re += ".*";
          i += 1;
        }
      } else {
        re += "[^/]*";
      }
    } else if (c === "?") {
      re += "[^/]";
    } else if (c === "[") {
      const end = pattern.indexOf("]", i + 2);
      if (end < 0) {
        throw new UsageError("bad_stage_path", `pattern ${JSON.stringify(pattern)} has a "[" without its "]"`, {
          hint: "write a set like [abc] or [a-z]",
        });
      }
      let set = pattern.slice(i + 1, end);
      const negate = set.startsWith("!") || set.startsWith("^");
      if (negate) set = set.slice(1);
      re += `[${negate ? "^" : ""}${set.replace(/[\\\]^]/g, (x) => `\\${x}`)}]`;
      i = end;
    } else {
      re += c.replace(/[.+^${}()|\\\]]/g, (x) => `\\${x}`);
    }
  }
  const compiled = new RegExp(`^${re}$`);
  if (cache.size > 1000) cache.clear();
  cache.set(pattern, compiled);
  return compiled;
}

/** Does `path` match `pattern` (a glob, or a plain path compared exactly)? */
export function matchesPath(pattern: string, path: string): boolean {
  return isPattern(pattern) ? compileGlob(pattern).test(path) : pattern === path;
}
