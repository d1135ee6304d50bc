/**
 * gemini's home for a stage granted run tools (docs/design/stage-tools.md,
 * "gemini's stage home"). In the mode the gemini runner uses, gemini 0.61
 * takes MCP servers only from settings files, and atomic never writes the
 * user's. `GEMINI_CLI_HOME` moves the directory gemini reads `.gemini`
 * (and `.agents`) from, so the stage gets a home of its own,
 * `gemini-home` in the attempt's artifact directory:
 *
 * - `.gemini/settings.json` (0600: the server's link holds the stage's
 *   credential): the user's settings, read as JSON with comments (gemini
 *   strips comments too; Bun.JSONC parses them, no dependency), with
 *   `mcpServers.atomic` added and `atomic` let through `mcp.allowed` and
 *   `mcp.excluded` where the user has those lists;
 * - every other entry of the user's `.gemini` a symbolic link to it: the
 *   login (`oauth_creds.json`), GEMINI.md, policies, skills, commands, and
 *   `tmp`, where gemini keeps its sessions (`tmp/<project>/chats`), so a
 *   session written by this stage is where a later stage, a resume or the
 *   user's own `gemini -r` looks for it, whatever home that one runs with;
 * - `.agents` (gemini's user skills) a link to the user's, if any.
 *
 * The user's `.gemini` (and its `tmp`) are made when missing, as gemini's
 * first run would; nothing else of the user's is written. A file gemini
 * makes that the user's `.gemini` has no entry for (its installation id, a
 * first project registry) stays in the stage home; gemini finds a
 * project's directory under `tmp` by the marker file in it, not only by
 * its registry. The user's gemini home is theirs as the stage's
 * environment sets it: `GEMINI_CLI_HOME` if set, else `HOME`.
 */

import { lstatSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { UsageError } from "../../shared/errors.ts";
import { userHome } from "../../shared/sandbox-option.ts";
import type { StageRequest } from "../types.ts";
import { STAGE_MCP_NAME, TOOL_WAIT_S, type StageMcpServer } from "./stage-mcp-config.ts";

type Env = Readonly<Record<string, string | undefined>>;

/** The directory gemini takes as its home in `env` (GEMINI_CLI_HOME, else HOME). */
export const geminiUserHome = (env: Env): string => env.GEMINI_CLI_HOME || userHome(env);

/** The user's `.gemini` in `env`. */
export const geminiUserDir = (env: Env): string => join(geminiUserHome(env), ".gemini");

/** Makes (or brings up to date) the stage's gemini home; returns it, for GEMINI_CLI_HOME. */
export function geminiStageHome(req: Pick<StageRequest, "artifactDir">, server: StageMcpServer, env: Env): string {
  const user = geminiUserDir(env);
  const settings = mergedSettings(join(user, "settings.json"), server);
  mkdirSync(join(user, "tmp"), { recursive: true });
  const home = join(req.artifactDir, "gemini-home");
  const dir = join(home, ".gemini");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (const name of readdirSync(user)) {
    if (name !== "settings.json") link(join(user, name), join(dir, name));
  }
  const agents = join(geminiUserHome(env), ".agents");
  if (present(agents)) link(agents, join(home, ".agents"));
  writeFileSync(join(dir, "settings.json"), JSON.stringify(settings, null, 2), { mode: 0o600 });
  return home;
}

/** The user's settings with the stage MCP server added. */
function mergedSettings(file: string, server: StageMcpServer): Record<string, unknown> {
  let text: string | undefined;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw unreadable(file, (err as Error).message);
  }
  let user: unknown = {};
  try {
    user = text?.trim() ? Bun.JSONC.parse(text) : {};
  } catch (err) {
    throw unreadable(file, (err as Error).message);
  }
  if (typeof user !== "object" || user === null || Array.isArray(user)) throw unreadable(file, "it is not a JSON object");
  const settings = user as Record<string, unknown>;
  const mcp = record(settings.mcp);
  if (Array.isArray(mcp.allowed) && !mcp.allowed.includes(STAGE_MCP_NAME)) mcp.allowed = [...mcp.allowed, STAGE_MCP_NAME];
  if (Array.isArray(mcp.excluded)) mcp.excluded = mcp.excluded.filter((name) => name !== STAGE_MCP_NAME);
  return {
    ...settings,
    ...(settings.mcp !== undefined ? { mcp } : {}),
    // A call waits as long as the tool does (ask_agent up to its timeout), not gemini's 10 minutes.
    mcpServers: { ...record(settings.mcpServers), [STAGE_MCP_NAME]: { command: server.command, args: server.args, env: server.env, timeout: TOOL_WAIT_S * 1000, trust: true } },
  };
}

const unreadable = (file: string, why: string) =>
  new UsageError("bad_config", `gemini's settings file ${file} cannot be read as JSON with comments (${why}), so atomic cannot add the stage's run tools to it`, {
    hint: "fix the file (gemini reads it too), or leave ask_user, message and ask_agent out of this stage's tools",
  });

const record = (v: unknown): Record<string, unknown> => (typeof v === "object" && v !== null && !Array.isArray(v) ? { ...(v as Record<string, unknown>) } : {});

/** An entry exists at `path` (a dangling link counts). */
function present(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

function link(target: string, at: string): void {
  if (!present(at)) symlinkSync(target, at);
}
