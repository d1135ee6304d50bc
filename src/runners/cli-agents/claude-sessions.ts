/**
 * Where Claude Code keeps a session: `$CLAUDE_CONFIG_DIR` (else
 * `~/.claude`) `/projects/<the cwd's slug>/<session id>.jsonl`, looked up
 * under the cwd it is started in. The store a claude attempt's session is
 * copied from when it ends and put back into where a stage continues it
 * (cli-session-copy.ts).
 */

import { existsSync, realpathSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { CliSessionStore } from "./cli-session-copy.ts";

/** claude's store: the project directory of the cwd (its slug), one file per session id. */
export const claudeSessions: CliSessionStore = {
  root: (_req, env) => env.CLAUDE_CONFIG_DIR || join(env.HOME || homedir(), ".claude"),
  find(root, req, id) {
    const path = join("projects", claudeProjectSlug(req.cwd), `${id}.jsonl`);
    return existsSync(join(root, path)) ? path : undefined;
  },
  place: (_root, req, id) => join("projects", claudeProjectSlug(req.cwd), `${id}.jsonl`),
};

/**
 * The directory name Claude Code gives a project: the real path of the cwd with every character other than a
 * letter or a digit made "-"; a name over 200 characters is cut there and ends in "-" and a hash of the path
 * (Claude Code's own: the Java string hash, its absolute value in base 36).
 */
export function claudeProjectSlug(cwd: string): string {
  let real = cwd;
  try {
    real = realpathSync(cwd);
  } catch {
    // claude takes the path as it is too
  }
  const slug = real.normalize("NFC").replace(/[^a-zA-Z0-9]/g, "-");
  if (slug.length <= 200) return slug;
  let hash = 0;
  for (let i = 0; i < real.length; i++) hash = (hash << 5) - hash + real.charCodeAt(i) | 0;
  return `${slug.slice(0, 200)}-${Math.abs(hash).toString(36)}`;
}
