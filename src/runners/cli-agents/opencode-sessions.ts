/**
 * opencode's sessions between machines (docs/design/runners.md, "Sessions
 * between machines"). opencode 1.18 keeps a session as rows of its SQLite
 * database (`$XDG_DATA_HOME/opencode/opencode.db`), not as a file, so it is
 * carried with opencode's own commands, never by writing its rows:
 *
 * - `keepOpencodeSession`, when an attempt whose session files travel
 *   (`StageRequest.sessionsTravel`: a journal other machines share) has
 *   completed or failed (a failed stage's result may be continued:
 *   failureMode "return"): `opencode export ID` prints the session as JSON, kept as
 *   the attempt's CLI_SESSION_FILE (cli-session-copy.ts's header, path
 *   `export`), which travels with the other session files. An opencode
 *   start costs seconds of CPU, so an attempt on one machine's journal,
 *   whose session never leaves it, exports nothing.
 * - `restoreOpencodeSession`, before a stage continuing (or forking) it
 *   starts: `opencode import FILE` of the copy, which adds the session to
 *   this machine's database or brings it to the copy's state (a session
 *   here may be behind: another host went on with it); `run -s` then
 *   continues the conversation as the earlier attempt ended it. A copy
 *   exported from the very database this stage's opencode uses (the
 *   header's path names it: `export:` and `databaseIdentity`) is not
 *   imported: the session is there as the earlier attempt left it, as on
 *   a journal one machine uses, and an opencode start is saved.
 *
 * Each command runs as the stage's CLI would (its binary, environment and
 * cwd), at most COMMAND_MS; one that fails is a line in the attempt's
 * diagnostics, and the stage goes on (a continuation without the session
 * then fails in opencode's own words, "Session not found").
 */

import { createHash } from "node:crypto";
import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import type { StageRequest } from "../types.ts";
import { machineId } from "../../shared/process-info.ts";
import { readSessionCopy, writeSessionCopy } from "./cli-session-copy.ts";

/** How long an export or an import may take (an opencode start is a few seconds; a busy machine, more). */
const COMMAND_MS = 120_000;
/** The header's path of an opencode copy: what it holds is `opencode export`'s output. */
const EXPORTED = "export";

type Env = Readonly<Record<string, string>>;

/** Exports session `id` into the attempt's directory; a sentence for the diagnostics. */
export async function keepOpencodeSession(binary: string, req: StageRequest, env: Env, id: string): Promise<string> {
  const out = await opencode(binary, ["export", id], req, env);
  if (out.code !== 0) return `could not export session ${id} (exit ${out.code}): ${out.stderr.trim().slice(-300)}`;
  const json = out.stdout.slice(out.stdout.indexOf("{"));
  try {
    if ((JSON.parse(json) as { info?: { id?: unknown } }).info?.id !== id) return `opencode export ${id} printed another session`;
  } catch {
    return `opencode export ${id} printed no JSON`;
  }
  const from = databaseIdentity(env);
  writeSessionCopy("opencode", id, from ? `${EXPORTED}:${from}` : EXPORTED, Buffer.from(json), req.artifactDir);
  return `session ${id} exported for another machine`;
}

/** Imports the earlier attempt's copy of session `id`; a sentence for the diagnostics, or undefined without a copy. */
export async function restoreOpencodeSession(binary: string, req: StageRequest, env: Env, id: string, earlierDir: string): Promise<string | undefined> {
  const copy = readSessionCopy("opencode", id, earlierDir);
  if (!copy || (copy.path !== EXPORTED && !copy.path.startsWith(`${EXPORTED}:`))) return undefined;
  const here = databaseIdentity(env);
  if (here && copy.path === `${EXPORTED}:${here}`) return `session ${id} is in this machine's opencode database already (the earlier attempt exported it from there): not imported`;
  mkdirSync(req.artifactDir, { recursive: true });
  const file = join(req.artifactDir, "opencode-import.json");
  writeFileSync(file, copy.body);
  const out = await opencode(binary, ["import", file], req, env);
  return out.code === 0 ? `session ${id} imported from the earlier attempt's copy` : `could not import session ${id} (exit ${out.code}): ${out.stderr.trim().slice(-300)}`;
}

/**
 * Which opencode database a stage with `env` uses: its file (`$XDG_DATA_HOME/opencode/opencode.db`, else under
 * `~/.local/share`) on this machine (hostname and machine id), by device, inode and birth time (a database removed
 * and made again is another one); undefined while there is none.
 */
function databaseIdentity(env: Env): string | undefined {
  const data = env.XDG_DATA_HOME || (env.HOME ? join(env.HOME, ".local", "share") : undefined);
  if (!data) return undefined;
  try {
    const st = statSync(join(data, "opencode", "opencode.db"));
    return createHash("sha256").update([hostname(), machineId(), st.dev, st.ino, Math.round(st.birthtimeMs)].join("/")).digest("hex").slice(0, 32);
  } catch {
    return undefined;
  }
}

async function opencode(binary: string, args: string[], req: StageRequest, env: Env): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = Bun.spawn([binary, ...args], { cwd: req.cwd, env, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => proc.kill("SIGKILL"), COMMAND_MS);
  try {
    const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
    return { code: await proc.exited, stdout, stderr };
  } finally {
    clearTimeout(timer);
  }
}
