/**
 * A CLI's own session file, carried with the attempt that wrote it, so that
 * a stage continuing (or forking) that session can run on another machine
 * (docs/design/runners.md, "Sessions between machines").
 *
 * claude, codex and gemini resume a session by id from their own store in
 * the user's home (gemini: gemini-sessions.ts): claude from `$CLAUDE_CONFIG_DIR` (else `~/.claude`)
 * `/projects/<the cwd's slug>/<id>.jsonl`, looked up under the cwd it is
 * started in; codex from `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`,
 * found by the id at the end of the name. Each is one JSON-lines file that
 * holds the whole conversation (a copy of it alone, in a home that never
 * saw the session, resumes it; checked with claude 2.1.197, codex
 * 0.171.0 and gemini 0.61.0). Where each looks: `claudeSessions` (claude-sessions.ts),
 * `codexSessions` (codex-rollout.ts). Side files are not carried (claude's subagent transcripts and
 * tool outputs it saved aside, codex's SQLite indexes, which it rebuilds
 * from the files).
 *
 * - `keepCliSession`, when an attempt ends: the CLI's file for the stage's
 *   session is copied into the attempt's directory as CLI_SESSION_FILE, a
 *   header line (`{"atomic":"cli-session","cli","session","path"}`, the
 *   path being where the file was in the CLI's store) and then the CLI's
 *   lines as they were. It is one of SESSION_FILES, so a worker host ships
 *   it to the artifact store with the others and a host continuing the
 *   stage fetches it (artifacts/session-files.ts).
 * - `restoreCliSession`, before a continuing stage starts its CLI: the
 *   earlier attempt's copy is put where the CLI looks for that session
 *   here, unless the file there is the same already. The copy wins over a
 *   different file there: continuing an attempt means its conversation as
 *   it ended (the same host may hold the session as it went on later, in
 *   another stage that resumed the same id). Written aside and renamed, so
 *   a CLI never reads half a file.
 *
 * The header's path is the stage's to write (its directory is its own), so
 * it is only taken when it has the shape the CLI gives its files; a claude
 * file goes under this machine's slug of the stage's cwd whatever it says.
 */

import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { CLI_SESSION_FILE } from "../../artifacts/stage-logs.ts";
import type { StageRequest } from "../types.ts";

/** Where a CLI keeps a session by id (relative paths are under `root`). */
export interface CliSessionStore {
  /** The CLI's own directory as the stage's process sees it (`env`: its environment). */
  root(req: StageRequest, env: Readonly<Record<string, string>>): string;
  /** The session's file here, relative to `root`, when the CLI has it. */
  find(root: string, req: StageRequest, id: string): string | undefined;
  /** Where the CLI looks for session `id` here, relative to `root`; `recorded`: the header's path (where it was written). */
  place(root: string, req: StageRequest, id: string, recorded: string): string;
}

interface Header {
  atomic: "cli-session";
  cli: string;
  session: string;
  path: string;
}

/** Session ids as the CLIs make them (a uuid; opencode's ses_…); anything else is not looked for. */
const SESSION_ID = /^[A-Za-z0-9_-]{1,100}$/;

/** Copies the CLI's file of session `id` into `artifactDir` (see the header); nothing when the CLI has none here. */
export function keepCliSession(cli: string, store: CliSessionStore, req: StageRequest, env: Readonly<Record<string, string>>, id: string, artifactDir: string): void {
  if (!SESSION_ID.test(id)) return;
  const root = store.root(req, env);
  const path = store.find(root, req, id);
  if (!path) return;
  writeSessionCopy(cli, id, path, readFileSync(join(root, path)), artifactDir);
}

/** Writes CLI_SESSION_FILE into `artifactDir`: the header naming `cli`, session `id` and `path`, then `body` (aside, then renamed). */
export function writeSessionCopy(cli: string, id: string, path: string, body: Uint8Array, artifactDir: string): void {
  const header: Header = { atomic: "cli-session", cli, session: id, path };
  const copy = join(artifactDir, CLI_SESSION_FILE);
  mkdirSync(artifactDir, { recursive: true });
  writeFileSync(`${copy}.part`, Buffer.concat([Buffer.from(`${JSON.stringify(header)}\n`), body]));
  renameSync(`${copy}.part`, copy);
}

/** The copy of session `id` of `cli` that the attempt in `earlierDir` left: its header's path and its body; undefined without one. */
export function readSessionCopy(cli: string, id: string, earlierDir: string): { path: string; body: Buffer } | undefined {
  if (!SESSION_ID.test(id)) return undefined;
  let bytes: Buffer;
  try {
    bytes = readFileSync(join(earlierDir, CLI_SESSION_FILE));
  } catch {
    return undefined;
  }
  const eol = bytes.indexOf(10);
  let header: Partial<Header>;
  try {
    header = JSON.parse(bytes.subarray(0, eol < 0 ? bytes.length : eol).toString("utf8")) as Partial<Header>;
  } catch {
    return undefined;
  }
  if (eol < 0 || header.atomic !== "cli-session" || header.cli !== cli || header.session !== id || typeof header.path !== "string") return undefined;
  return { path: header.path, body: bytes.subarray(eol + 1) };
}

/**
 * Puts the copy of session `id` that the attempt in `earlierDir` left where the CLI looks for it here (see the
 * header). Returns the path written, or undefined: no copy there, a copy of another CLI or session, or the same
 * file in place already.
 */
export function restoreCliSession(cli: string, store: CliSessionStore, req: StageRequest, env: Readonly<Record<string, string>>, id: string, earlierDir: string): string | undefined {
  const copy = readSessionCopy(cli, id, earlierDir);
  if (!copy) return undefined;
  const { body } = copy;
  const root = store.root(req, env);
  const here = store.find(root, req, id);
  if (here && sameBytes(join(root, here), body)) return undefined;
  const target = join(root, here ?? store.place(root, req, id, copy.path));
  mkdirSync(dirname(target), { recursive: true });
  writeFileSync(`${target}.atomic-part`, body);
  renameSync(`${target}.atomic-part`, target);
  return target;
}

function sameBytes(path: string, bytes: Buffer): boolean {
  try {
    return readFileSync(path).equals(bytes);
  } catch {
    return false;
  }
}
