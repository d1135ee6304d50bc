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
 * index serves `%text%`): on SQLite with 100,000 runs, a first page of 50
 * with its total took about 100 ms for a text found in one run (both
 * statements scan), 45 ms for a common one, measured on a 2-core machine;
 * LIKE was three times faster there than `instr(lower(…))`.
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
