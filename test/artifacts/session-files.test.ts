/**
 * A session's files between machines (src/artifacts/session-files.ts), with
 * real files and a directory store: the attempt that ran on one "machine"
 * (a home) ships its session files whole when it ends; a stage continuing
 * it on another home gets its own copy under that home's artifacts root,
 * byte for byte; the recorded directory is kept where it holds the session
 * (same host, shared filesystem) or where nothing was shipped; a file the
 * store capped is refused, and nothing of it is left to be taken for a
 * session. The fleet test (test/fleet/sessions-host.test.ts) runs the same
 * through `atomic worker` hosts that do not share their homes.
 */

import { afterEach, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DirectoryArtifactStore } from "../../src/artifacts/directory-store.ts";
import { sessionHere, shipSessionFiles } from "../../src/artifacts/session-files.ts";
import { CONVERSATION_FILE, PI_SESSION_FILE, SESSION_USAGE_FILE, TRANSCRIPT } from "../../src/artifacts/stage-logs.ts";
import type { ArtifactKey } from "../../src/artifacts/store.ts";
import { newRunId } from "../../src/shared/ids.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterEach(() => removeTempDirs());

/** An attempt's directory under a new home's artifacts root ("a machine"), and its key. */
function attempt(runId: string = newRunId()): { root: string; dir: string; key: ArtifactKey } {
  const stage = `${runId}/1-first/attempt-1`;
  const root = join(makeTempDir("atomic-session-home-"), "artifacts");
  const dir = join(root, stage);
  mkdirSync(dir, { recursive: true });
  return { root, dir, key: { rootId: runId, runId, stage } };
}

test("the session files an attempt left reach another machine whole; the transcript is not part of them", async () => {
  const store = new DirectoryArtifactStore(makeTempDir("atomic-session-store-"), 64 * 1024 * 1024);
  const ran = attempt();
  const conversation = JSON.stringify([{ role: "user", content: "Remember 42. ".repeat(100_000) }]);
  writeFileSync(join(ran.dir, CONVERSATION_FILE), conversation);
  writeFileSync(join(ran.dir, SESSION_USAGE_FILE), '{"thread":[1,2,3,4]}');
  writeFileSync(join(ran.dir, TRANSCRIPT), "not a session file");
  await shipSessionFiles(ran.dir, store, ran.key);
  // Shipped again (a result sent twice): nothing doubles.
  await shipSessionFiles(ran.dir, store, ran.key);
  expect((await store.list(ran.key)).map((f) => [f.name, f.size, f.complete]).sort()).toEqual(
    [
      [CONVERSATION_FILE, Buffer.byteLength(conversation), true],
      [SESSION_USAGE_FILE, 20, true],
    ].sort(),
  );

  const elsewhere = attempt(ran.key.runId);
  const copy = join(elsewhere.root, ran.key.stage);
  expect(await sessionHere(join("/nonexistent-host-home/artifacts", ran.key.stage), ran.key.rootId, store, join(elsewhere.root, "..", "other-artifacts"))).toBe(
    join(elsewhere.root, "..", "other-artifacts", ran.key.stage),
  );
  // This machine already ran an attempt directory of that name but holds no session there: fetched into it.
  expect(await sessionHere(join("/nonexistent-host-home/artifacts", ran.key.stage), ran.key.rootId, store, elsewhere.root)).toBe(copy);
  expect(readFileSync(join(copy, CONVERSATION_FILE), "utf8")).toBe(conversation);
  expect(readFileSync(join(copy, SESSION_USAGE_FILE), "utf8")).toBe('{"thread":[1,2,3,4]}');
  expect(existsSync(join(copy, TRANSCRIPT))).toBe(false);
});

test("the recorded directory is kept where it holds the session, or where the store has none of it", async () => {
  const store = new DirectoryArtifactStore(makeTempDir("atomic-session-store-"), 64 * 1024 * 1024);
  const ran = attempt();
  writeFileSync(join(ran.dir, PI_SESSION_FILE), '{"type":"session"}\n');
  // The same machine, or a filesystem the hosts share: read where it ran, nothing fetched.
  expect(await sessionHere(ran.dir, ran.key.rootId, store, attempt().root)).toBe(ran.dir);
  // Never shipped (it ran where nothing ships): the recorded path, for the runner to say it is missing.
  const gone = join("/nonexistent-host-home/artifacts", ran.key.stage);
  expect(await sessionHere(gone, ran.key.rootId, store, attempt().root)).toBe(gone);
  expect(await sessionHere(gone, ran.key.rootId, undefined, attempt().root)).toBe(gone);
});

test("a session file the store capped is refused, and no part of the session is written", async () => {
  const store = new DirectoryArtifactStore(makeTempDir("atomic-session-store-"), 256 * 1024);
  const ran = attempt();
  writeFileSync(join(ran.dir, SESSION_USAGE_FILE), '{"m":[1]}');
  writeFileSync(join(ran.dir, CONVERSATION_FILE), "x".repeat(600 * 1024));
  await shipSessionFiles(ran.dir, store, ran.key);
  const elsewhere = attempt();
  await expect(sessionHere(join("/nonexistent-host-home/artifacts", ran.key.stage), ran.key.rootId, store, elsewhere.root)).rejects.toThrow(
    /its conversation\.json is larger than the artifact store keeps \(artifacts\.maxFileBytes\); \d+ bytes of its start were dropped/,
  );
  expect(existsSync(join(elsewhere.root, ran.key.stage)) ? readdirSync(join(elsewhere.root, ran.key.stage)) : []).toEqual([]);
});
