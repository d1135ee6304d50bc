/**
 * Where gemini keeps a session: the store a gemini attempt's session is
 * copied from when it ends and put back into where a stage resumes it on
 * another machine (cli-session-copy.ts; docs/design/runners.md, "Sessions
 * between machines").
 *
 * gemini 0.61 keeps each session in one JSON-lines file,
 * `~/.gemini/tmp/<project>/chats/session-<time>-<first 8 of the id>.jsonl`,
 * whose first line names the session (`{"sessionId": …}`). `<project>` is
 * the directory gemini gives the cwd it starts in: the one under `tmp` (or
 * `history`) whose `.project_root` file holds that cwd's path (its registry,
 * `projects.json`, only remembers the choice). `-r ID` looks for the id
 * among that project's chats only, and a copy of the file alone there
 * resumes it, under another home and another cwd (checked with 0.61.0).
 *
 * Putting a copy back where no project of the cwd exists yet makes one as
 * gemini would: `tmp/<the cwd's base name, slugged>` (`-1`, `-2`, … when
 * that name is taken) holding `.project_root`; gemini then finds it by that
 * marker and records it in its registry itself.
 */

import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, realpathSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import type { CliSessionStore } from "./cli-session-copy.ts";
import { geminiUserDir } from "./gemini-home.ts";

const MARKER = ".project_root";

/** gemini's store: the project directory of the cwd under `tmp`, one chats file per session. */
export const geminiSessions: CliSessionStore = {
  // With run tools the stage has a gemini home of its own whose `tmp` is a link to the user's (gemini-home.ts).
  root: (_req, env) => geminiUserDir(env),
  find(root, req, id) {
    const project = projectOf(root, req.cwd);
    if (!project) return undefined;
    const chats = join("tmp", project, "chats");
    let names: string[];
    try {
      names = readdirSync(join(root, chats));
    } catch {
      return undefined;
    }
    const name = names.find((n) => n.startsWith("session-") && n.endsWith(`-${id.slice(0, 8)}.jsonl`) && firstLineNames(join(root, chats, n), id));
    return name ? join(chats, name) : undefined;
  },
  place(root, req, id, recorded) {
    const project = projectOf(root, req.cwd) ?? claimProject(root, req.cwd);
    const name = basename(recorded);
    const shaped = /^session-[0-9T-]+-[A-Za-z0-9]{1,8}\.jsonl$/.test(name) && name.endsWith(`-${id.slice(0, 8)}.jsonl`);
    const now = new Date().toISOString();
    return join("tmp", project, "chats", shaped ? name : `session-${now.slice(0, 16).replaceAll(":", "-")}-${id.slice(0, 8)}.jsonl`);
  },
};

/** The cwd's path as gemini records it (its real path: gemini starts in it). */
function projectPath(cwd: string): string {
  try {
    return realpathSync(cwd);
  } catch {
    return resolve(cwd);
  }
}

/** The directory under `tmp` gemini uses for `cwd` here, by its marker; undefined when there is none yet. */
function projectOf(root: string, cwd: string): string | undefined {
  const want = projectPath(cwd);
  let names: string[];
  try {
    names = readdirSync(join(root, "tmp"));
  } catch {
    return undefined;
  }
  return names.find((n) => markerOf(join(root, "tmp", n)) === want);
}

/** A project directory for `cwd` under `tmp`, named as gemini names one, with its marker. */
function claimProject(root: string, cwd: string): string {
  const path = projectPath(cwd);
  const slug = basename(path).toLowerCase().replace(/[^a-z0-9]/g, "-").replace(/-+/g, "-").replace(/^-|-$/g, "") || "project";
  for (let n = 0; ; n++) {
    const name = n === 0 ? slug : `${slug}-${n}`;
    if (existsSync(join(root, "tmp", name)) || existsSync(join(root, "history", name))) continue;
    mkdirSync(join(root, "tmp", name), { recursive: true });
    writeFileSync(join(root, "tmp", name, MARKER), path);
    return name;
  }
}

function markerOf(dir: string): string | undefined {
  try {
    return readFileSync(join(dir, MARKER), "utf8").trim();
  } catch {
    return undefined;
  }
}

/** The chats file's first line is session `id`'s. */
function firstLineNames(file: string, id: string): boolean {
  const head = Buffer.alloc(4096);
  let fd: number | undefined;
  try {
    fd = openSync(file, "r");
    const text = head.subarray(0, readSync(fd, head, 0, head.length, 0)).toString("utf8");
    const eol = text.indexOf("\n");
    return (JSON.parse(eol < 0 ? text : text.slice(0, eol)) as { sessionId?: unknown }).sessionId === id;
  } catch {
    return false;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
