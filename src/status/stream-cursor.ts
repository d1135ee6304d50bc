/**
 * The resume cursor of a run's event stream (the SSE `id`).
 *
 * A stream carries the events of a run and of all its child runs, and each
 * run numbers its events on its own (seq 1..n). So a position in the stream
 * is a vector: the last seq delivered for every run of the tree.
 *
 * Runs in the vector are named by their place in the tree, not by their
 * 18-character ids: the root is "", its children are "0", "1", ... in the
 * order the parent's journal announced them (the `step_started` that names
 * the child), grandchildren "0.0", ... A parent announces a new child only
 * after every earlier one, so these names never change once given.
 *
 * Text form: the root's seq, then `;<path>:<seq>` for every child run with
 * at least one delivered event, e.g. `42;0:17;0.0:3;1:20`. A missing child
 * means seq 0 (nothing delivered yet).
 */

export type TreeCursor = Map<string, number>;

const CURSOR = /^\d{1,15}(;\d{1,6}(\.\d{1,6}){0,15}:\d{1,15})*$/;
const MAX_CURSOR_LENGTH = 64 * 1024;

/** Parses a cursor's text form; undefined when it is not one. */
export function parseCursor(text: string): TreeCursor | undefined {
  const t = text.trim();
  if (t.length > MAX_CURSOR_LENGTH || !CURSOR.test(t)) return undefined;
  const [root, ...children] = t.split(";");
  const cursor: TreeCursor = new Map([["", Number(root)]]);
  for (const part of children) {
    const colon = part.lastIndexOf(":");
    const path = part.slice(0, colon);
    if (cursor.has(path)) return undefined;
    cursor.set(path, Number(part.slice(colon + 1)));
  }
  return cursor;
}

/** The text form of `seqOf(path)` over `paths` (the root's path "" first). */
export function formatCursor(paths: readonly string[], seqOf: (path: string) => number): string {
  let out = String(seqOf(""));
  for (const path of paths) {
    if (path === "") continue;
    const seq = seqOf(path);
    if (seq > 0) out += `;${path}:${seq}`;
  }
  return out;
}
