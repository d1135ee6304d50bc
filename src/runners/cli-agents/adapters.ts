/**
 * The five CLI agents' flags and event streams (see docs/design/runners.md; these CLIs
 * change quickly, so unknown record types and fields are ignored, never
 * fatal). Each adapter maps its agent's records onto ours: session id,
 * assistant text, tool starts/ends, usage (normalized: usage.ts), and the
 * final event that decides success.
 *
 * | agent    | delivery | session          | usage semantics      | cost          |
 * |----------|----------|------------------|----------------------|---------------|
 * | claude   | stream   | --session-id     | input excludes cache | reported      |
 * | codex    | resume   | thread.started   | cumulative; incl. cache | price table |
 * | gemini   | resume   | --session-id     | input includes cache | price table   |
 * | opencode | resume   | sessionID        | input excludes cache | reported      |
 * | pi       | stream   | --session <file> | input excludes cache | reported      |
 *
 * (pi: the session file lives in the stage's artifact dir; its id comes from `get_state`.)
 */

import type { CliAdapter } from "./cli-runner.ts";
import { claude } from "./claude.ts";
import { codex } from "./codex.ts";
import { gemini } from "./gemini.ts";
import { opencode } from "./opencode.ts";
import { pi } from "./pi.ts";

export const ADAPTERS: readonly CliAdapter[] = [claude, codex, gemini, opencode, pi];

/** Runners that take no input while a turn runs: a steer or followUp waits for the turn's end and resumes the session. */
export function takesNoInputWhileRunning(runner: string | undefined): boolean {
  return ADAPTERS.some((a) => a.kind === runner && a.delivery === "resume");
}
