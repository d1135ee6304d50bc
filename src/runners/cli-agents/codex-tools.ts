/**
 * Whether a codex stage's tools only read: codex has no per-tool switch,
 * so a stage whose `tools` name none of write, edit or bash gets codex's
 * read-only sandbox (codex.ts), or, inside atomic's sandbox, where codex's
 * own is off, a read-only cwd (sandbox-files.ts).
 */

import type { StageRequest } from "../types.ts";

const WRITING_TOOLS = ["write", "edit", "bash"];

/** Tools named, none of them writing. */
export function readOnly(req: Pick<StageRequest, "agent">): boolean {
  const tools = req.agent?.tools;
  return tools !== undefined && !tools.some((t) => WRITING_TOOLS.includes(t));
}
