/**
 * opencode's session between machines (src/runners/cli-agents/opencode-sessions.ts)
 * with a stand-in for the opencode binary that records its commands: the
 * export names the database it came from, and a stage whose opencode uses
 * that very database does not import it (one opencode start saved); another
 * data directory, or the database made again, imports it. The real opencode
 * exporting and importing across hosts: test/fleet/sessions-host.test.ts.
 */

import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, test } from "bun:test";
import { keepOpencodeSession, restoreOpencodeSession } from "../../src/runners/cli-agents/opencode-sessions.ts";
import type { StageRequest } from "../../src/runners/types.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterAll(removeTempDirs);

const ID = "ses_0a1b2c3d4e5f";

function world() {
  const dir = makeTempDir("atomic-opencode-sessions-");
  const log = join(dir, "commands.log");
  const binary = join(dir, "opencode");
  // Prints a session for `export ID`; records every command.
  writeFileSync(binary, `#!/bin/sh\necho "$*" >> '${log}'\n[ "$1" = export ] && printf '{"info":{"id":"%s"},"messages":[]}\\n' "$2"\nexit 0\n`);
  chmodSync(binary, 0o755);
  const cwd = join(dir, "work");
  mkdirSync(cwd);
  const home = (name: string) => {
    const data = join(dir, name, "data");
    mkdirSync(join(data, "opencode"), { recursive: true });
    writeFileSync(join(data, "opencode", "opencode.db"), "");
    return { HOME: join(dir, name), XDG_DATA_HOME: data };
  };
  const attempt = (name: string) => ({ cwd, artifactDir: join(dir, "artifacts", name) }) as StageRequest;
  const commands = () => (existsSync(log) ? readFileSync(log, "utf8").trim().split("\n") : []);
  return { dir, binary, home, attempt, commands };
}

test("a copy exported from the database a continuing stage uses is not imported; another database's is", async () => {
  const w = world();
  const ha = w.home("ha");
  const hb = w.home("hb");
  const first = w.attempt("first");
  expect(await keepOpencodeSession(w.binary, first, ha, ID)).toBe(`session ${ID} exported for another machine`);
  const header = JSON.parse(readFileSync(join(first.artifactDir, "cli-session.jsonl"), "utf8").split("\n")[0]!) as { path: string };
  expect(header.path).toMatch(/^export:[0-9a-f]{32}$/);
  // Where it was exported from: nothing to import.
  expect(await restoreOpencodeSession(w.binary, w.attempt("second"), ha, ID, first.artifactDir)).toBe(
    `session ${ID} is in this machine's opencode database already (the earlier attempt exported it from there): not imported`,
  );
  expect(w.commands()).toEqual([`export ${ID}`]);
  // Another data directory (another machine's): imported.
  expect(await restoreOpencodeSession(w.binary, w.attempt("third"), hb, ID, first.artifactDir)).toBe(`session ${ID} imported from the earlier attempt's copy`);
  expect(w.commands()).toEqual([`export ${ID}`, `import ${join(w.attempt("third").artifactDir, "opencode-import.json")}`]);
  // The same path, the database made again (its sessions gone; another file in its place): imported.
  const db = join(ha.XDG_DATA_HOME, "opencode", "opencode.db");
  writeFileSync(`${db}.new`, "");
  renameSync(`${db}.new`, db);
  expect(await restoreOpencodeSession(w.binary, w.attempt("fourth"), ha, ID, first.artifactDir)).toBe(`session ${ID} imported from the earlier attempt's copy`);
  // No database yet: imported.
  rmSync(db);
  expect(await restoreOpencodeSession(w.binary, w.attempt("fifth"), ha, ID, first.artifactDir)).toBe(`session ${ID} imported from the earlier attempt's copy`);
  expect(w.commands()).toHaveLength(4);
});

test("a copy of the older shape (path `export`, no database named) is imported", async () => {
  const w = world();
  const ha = w.home("ha");
  const earlier = w.attempt("first");
  mkdirSync(earlier.artifactDir, { recursive: true });
  writeFileSync(join(earlier.artifactDir, "cli-session.jsonl"), `${JSON.stringify({ atomic: "cli-session", cli: "opencode", session: ID, path: "export" })}\n{"info":{"id":"${ID}"},"messages":[]}`);
  expect(await restoreOpencodeSession(w.binary, w.attempt("second"), ha, ID, earlier.artifactDir)).toBe(`session ${ID} imported from the earlier attempt's copy`);
  expect(w.commands()).toHaveLength(1);
});
