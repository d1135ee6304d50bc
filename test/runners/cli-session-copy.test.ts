/**
 * The copy of a CLI's own session file that travels with an attempt
 * (src/runners/cli-agents/cli-session-copy.ts, with claude-sessions.ts and
 * codex-rollout.ts and gemini-sessions.ts for where each CLI looks), on files alone: the header
 * is the stage's to write, so a path out of the CLI's store is not taken,
 * a copy of another session is not put back, the same file in place is
 * left alone and a different one is replaced by the copy. The real CLIs
 * resuming from it on another host: test/fleet/sessions-host.test.ts.
 */

import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, test } from "bun:test";
import { keepCliSession, restoreCliSession } from "../../src/runners/cli-agents/cli-session-copy.ts";
import { claudeProjectSlug, claudeSessions } from "../../src/runners/cli-agents/claude-sessions.ts";
import { codexSessions } from "../../src/runners/cli-agents/codex-rollout.ts";
import { geminiSessions } from "../../src/runners/cli-agents/gemini-sessions.ts";
import type { StageRequest } from "../../src/runners/types.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterAll(removeTempDirs);

const ID = "01a24e57-52e3-7353-ae18-10505a27ecdd";
const LINES = '{"type":"session_meta"}\n{"type":"response_item"}\n';

function world() {
  const dir = makeTempDir("atomic-cli-session-");
  const cwd = join(dir, "work");
  const earlier = join(dir, "earlier");
  mkdirSync(cwd);
  mkdirSync(earlier);
  return { dir, cwd, earlier, req: { cwd } as StageRequest, env: { HOME: join(dir, "home"), CODEX_HOME: join(dir, "codex") } };
}

const copyWith = (dir: string, header: Record<string, unknown>, body = LINES) => writeFileSync(join(dir, "cli-session.jsonl"), `${JSON.stringify({ atomic: "cli-session", ...header })}\n${body}`);

test("a codex copy is kept with its place in the store, and put back there in a home that lacks it", () => {
  const w = world();
  const rel = `sessions/2026/12/07/rollout-2026-12-07T02-31-15-${ID}.jsonl`;
  mkdirSync(join(w.env.CODEX_HOME, "sessions/2026/12/07"), { recursive: true });
  writeFileSync(join(w.env.CODEX_HOME, rel), LINES);
  keepCliSession("codex", codexSessions, w.req, w.env, ID, w.earlier);
  const kept = readFileSync(join(w.earlier, "cli-session.jsonl"), "utf8");
  expect(JSON.parse(kept.split("\n")[0]!)).toEqual({ atomic: "cli-session", cli: "codex", session: ID, path: rel });
  const other = { ...w.env, CODEX_HOME: join(w.dir, "codex-other") };
  expect(restoreCliSession("codex", codexSessions, w.req, other, ID, w.earlier)).toBe(join(other.CODEX_HOME, rel));
  expect(readFileSync(join(other.CODEX_HOME, rel), "utf8")).toBe(LINES);
  // The same file in place already: left alone.
  expect(restoreCliSession("codex", codexSessions, w.req, other, ID, w.earlier)).toBeUndefined();
});

test("a path out of codex's store in the header is not taken: the file goes under sessions/ named for the thread", () => {
  const w = world();
  copyWith(w.earlier, { cli: "codex", session: ID, path: "../../.bashrc" });
  const put = restoreCliSession("codex", codexSessions, w.req, w.env, ID, w.earlier)!;
  expect(put.startsWith(join(w.env.CODEX_HOME, "sessions") + "/")).toBe(true);
  expect(put.endsWith(`-${ID}.jsonl`)).toBe(true);
  expect(existsSync(join(w.dir, ".bashrc"))).toBe(false);
});

test("a copy of another session or another CLI is not put back", () => {
  const w = world();
  copyWith(w.earlier, { cli: "codex", session: "another", path: `sessions/2026/12/07/rollout-2026-12-07T02-31-15-${ID}.jsonl` });
  expect(restoreCliSession("codex", codexSessions, w.req, w.env, ID, w.earlier)).toBeUndefined();
  copyWith(w.earlier, { cli: "claude", session: ID, path: "x" });
  expect(restoreCliSession("codex", codexSessions, w.req, w.env, ID, w.earlier)).toBeUndefined();
  expect(existsSync(w.env.CODEX_HOME)).toBe(false);
});

test("claude's copy goes under this cwd's project, replacing a different file of the same session there", () => {
  const w = world();
  const project = join(w.env.HOME, ".claude", "projects", claudeProjectSlug(w.cwd));
  mkdirSync(project, { recursive: true });
  writeFileSync(join(project, `${ID}.jsonl`), '{"older":true}\n');
  copyWith(w.earlier, { cli: "claude", session: ID, path: "projects/-elsewhere/x.jsonl" });
  expect(restoreCliSession("claude", claudeSessions, w.req, w.env, ID, w.earlier)).toBe(join(project, `${ID}.jsonl`));
  expect(readFileSync(join(project, `${ID}.jsonl`), "utf8")).toBe(LINES);
  expect(readdirSync(project)).toEqual([`${ID}.jsonl`]);
});

test("claude's project name: letters and digits kept, a long path cut at 200 with its hash", () => {
  const w = world();
  expect(claudeProjectSlug(w.cwd)).toBe(w.cwd.replace(/[^a-zA-Z0-9]/g, "-"));
  const long = `/nowhere/${"a".repeat(250)}`;
  const slug = claudeProjectSlug(long);
  expect(slug.slice(0, 201)).toBe(`${long.replace(/[^a-zA-Z0-9]/g, "-").slice(0, 200)}-`);
  expect(slug.slice(201)).toMatch(/^[0-9a-z]+$/);
});

test("gemini's copy goes into the chats of the project gemini has for this cwd, or one made for it with its marker", () => {
  const w = world();
  const gem = join(w.env.HOME, ".gemini");
  const name = `session-2026-12-07T05-40-${ID.slice(0, 8)}.jsonl`;
  const lines = `{"sessionId":"${ID}","kind":"main"}\n{"$set":{}}\n`;
  // Where it ran: the project "work" (its marker names the cwd); another session's file with the same 8 first characters is not it.
  mkdirSync(join(gem, "tmp", "work", "chats"), { recursive: true });
  writeFileSync(join(gem, "tmp", "work", ".project_root"), w.cwd);
  writeFileSync(join(gem, "tmp", "work", "chats", `session-2026-12-07T05-39-${ID.slice(0, 8)}.jsonl`), `{"sessionId":"${ID.slice(0, 8)}-other"}\n`);
  writeFileSync(join(gem, "tmp", "work", "chats", name), lines);
  keepCliSession("gemini", geminiSessions, w.req, w.env, ID, w.earlier);
  expect(JSON.parse(readFileSync(join(w.earlier, "cli-session.jsonl"), "utf8").split("\n")[0]!).path).toBe(`tmp/work/chats/${name}`);
  // Another machine, where a project "work" belongs to another directory: a new one, "work-1", marked as this cwd's.
  const other = { HOME: join(w.dir, "home-other") };
  mkdirSync(join(other.HOME, ".gemini", "tmp", "work"), { recursive: true });
  writeFileSync(join(other.HOME, ".gemini", "tmp", "work", ".project_root"), "/elsewhere/work");
  expect(restoreCliSession("gemini", geminiSessions, w.req, other, ID, w.earlier)).toBe(join(other.HOME, ".gemini", "tmp", "work-1", "chats", name));
  expect(readFileSync(join(other.HOME, ".gemini", "tmp", "work-1", ".project_root"), "utf8")).toBe(w.cwd);
  expect(readFileSync(join(other.HOME, ".gemini", "tmp", "work-1", "chats", name), "utf8")).toBe(lines);
  // Found there next time: the same file is left alone.
  expect(restoreCliSession("gemini", geminiSessions, w.req, other, ID, w.earlier)).toBeUndefined();
});
