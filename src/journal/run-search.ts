/**
 * The text filter of run listings (ListRunsFilter.text), shared by the
 * backends: what a run's text is and how a typed text is compared with it.
 *
 * A run matches when its id, its workflow name, or the stored JSON text of
 * its inputs, outputs or error contains the typed text, ignoring case as
 * the database's LIKE does (SQLite's `like`: ASCII letters; Postgres's
 * `ilike`: every letter), the text's `%`, `_` and `\` taken literally. The
 * JSON columns hold `JSON.stringify` text, so the typed text is compared in
 * its JSON-escaped form there: a quote typed matches a quote stored inside
 * a string. A substring search scans the runs the other filters leave (no
 * index serves `%text%`), and a console search reads them once: a page
 * that is not full gives its total without a count (status/summaries.ts),
 * and a full one was found among the newest runs (sqlite/reads.ts
 * listRuns), leaving the count as the one pass. On SQLite with 100,000
 * runs (bench/status-100k.ts, a 2-core machine at load 7), a text in one
 * run took 57 ms for its first page and total, a text in a seventh of the
 * runs 107 ms (the count); before, a rare text read the table twice, the
 * page through the roots' index with a lookup per run (238 ms at load
 * 13-17). LIKE was three times faster than `instr(lower(…))`.
 */

/** The most characters of text a search takes. */
export const MAX_SEARCH_TEXT = 200;

export interface SearchNeedles {
  /** Compared with the id and the workflow name. */
  plain: string;
  /** Compared with the JSON text of inputs, outputs and error. */
  json: string;
}

/** The forms of a typed text to look for; undefined when it is empty after trimming. */
export function searchNeedles(text: string): SearchNeedles | undefined {
  const t = text.trim();
  if (!t) return undefined;
  return { plain: t, json: JSON.stringify(t).slice(1, -1) };
}

/** The searched columns of the runs table: matched by `plain` (the first two) or by `json` (the rest). */
export const SEARCHED_COLUMNS = { plain: ["id", "workflow_name"], json: ["inputs", "outputs", "error"] } as const;

/** A LIKE pattern (escape character `\\`) that finds `text` anywhere, its wildcards taken literally. */
export function likePattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}
