/**
 * Where in the user's own code an error was thrown: the first frame of its
 * stack that is neither atomic's own code (inside the binary that is under
 * `/$bunfs/`, from source it is under src/) nor Bun's (`native`, `node:`),
 * preferring the user's files over their node_modules.
 *
 * The engine records it with a run's error (`ErrorInfo.at`, and the stack),
 * so the failure sentence can name the file and line and `--verbose` can
 * print the stack, in the process that printed the run and in `show` later.
 */

import { join } from "node:path";

const OWN_ROOT = join(import.meta.dir, "..");
// An absolute path right after "at " or "(": inside the binary atomic's own frames are source-mapped to relative
// paths (`src/engine/…`), which must not read as a user's file (a "/engine/…" inside them).
const FRAME = /(?:^at |\()((?:\/|[A-Za-z]:\\)[^():]+):(\d+)(?::(\d+))?\)?\s*$/;

export interface SourcePlace {
  file: string;
  line: number;
  column?: number | undefined;
}

function ownFile(file: string): boolean {
  return file.startsWith("/$bunfs/") || file.startsWith(`${OWN_ROOT}/`);
}

/** The user's frame an error's stack points at, if any. */
export function userPlace(err: Error): SourcePlace | undefined {
  let fallback: SourcePlace | undefined;
  for (const line of (err.stack ?? "").split("\n").slice(1)) {
    const m = FRAME.exec(line.trim());
    if (!m || ownFile(m[1]!)) continue;
    const place = { file: m[1]!, line: Number(m[2]), column: m[3] ? Number(m[3]) : undefined };
    if (!place.file.includes("/node_modules/")) return place;
    fallback ??= place;
  }
  return fallback;
}

export function formatPlace(p: SourcePlace, cwd = process.cwd()): string {
  const file = p.file.startsWith(`${cwd}/`) ? p.file.slice(cwd.length + 1) : p.file;
  return `${file}:${p.line}${p.column ? `:${p.column}` : ""}`;
}
