/**
 * The shipper (src/artifacts/shipper.ts) with real files that grow while it
 * runs and a real store:
 * - Postgres on a cluster of this test's own that is stopped (pg_ctl stop
 *   -m immediate) while the files keep growing and then started again: the
 *   shipper reports the failures, goes on from its offset once the server is
 *   back, and the store ends with every byte of every file exactly once,
 *   marked complete by stop();
 * - a directory store: a file that appears late is shipped too; a file the
 *   stage replaced with a link to another file is never shipped;
 * - a second shipper for the same attempt (a host that restarted) goes on
 *   from what the store has without doubling anything; a store that lost
 *   bytes it had confirmed gets them again.
 */

import { afterAll, afterEach, expect, test } from "bun:test";
import { appendFileSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DirectoryArtifactStore } from "../../src/artifacts/directory-store.ts";
import { shipStageFiles } from "../../src/artifacts/shipper.ts";
import type { ArtifactKey, ArtifactStore } from "../../src/artifacts/store.ts";
import { PostgresJournal } from "../../src/journal/postgres/postgres-journal.ts";
import { newRunId } from "../../src/shared/ids.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { postgresInstalled, startCluster, type Cluster } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

let cluster: Cluster | undefined;
const journals: PostgresJournal[] = [];

afterEach(async () => {
  for (const j of journals.splice(0)) await j.close();
  removeTempDirs();
});
afterAll(() => cluster?.stop());

/** A stage attempt's directory laid out as under a home's artifacts root, and its key. */
function stageDir(): { dir: string; key: ArtifactKey } {
  const runId = newRunId();
  const stage = `${runId}/0-build/attempt-1`;
  const dir = join(makeTempDir("atomic-ship-"), "artifacts", stage);
  mkdirSync(dir, { recursive: true });
  return { dir, key: { rootId: runId, runId, stage } };
}

async function storedText(store: ArtifactStore, key: ArtifactKey, name: string): Promise<string> {
  const parts: Uint8Array[] = [];
  for (let offset = 0; ; ) {
    const chunk = await store.read(key, name, offset, 64 * 1024);
    if (!chunk || chunk.data.length === 0) break;
    parts.push(chunk.data);
    offset = chunk.offset + chunk.data.length;
  }
  return Buffer.concat(parts).toString();
}

/** Appends numbered lines to `path` every few ms until stopped. */
function writer(path: string, label: string): { stop(): void; count(): number } {
  let n = 0;
  const timer = setInterval(() => appendFileSync(path, `${label} line ${++n} ${"x".repeat(n % 50)}\n`), 5);
  return { stop: () => clearInterval(timer), count: () => n };
}

test.if(postgresInstalled())("postgres: files that grow while Postgres stops and starts again reach the store whole, once each, then complete", async () => {
  cluster = await startCluster();
  const url = new URL(cluster.adminUrl);
  url.searchParams.set("schema", "ship");
  const journal = await PostgresJournal.open(url.toString(), { retryMs: 300 });
  journals.push(journal);
  const store = journal.artifactStore({ maxFileBytes: 64 * 1024 * 1024 });
  const { dir, key } = stageDir();
  const out = writer(join(dir, "stdout.log"), "out");
  const err = writer(join(dir, "stderr.log"), "err");
  const errors: Error[] = [];
  const shipper = shipStageFiles(dir, store, key, { intervalMs: 100, onError: (e) => errors.push(e) });
  try {
    await waitUntil(async () => (await store.list(key)).length === 2, 30_000, "both files in the store");
    cluster.stopServer();
    const during = out.count();
    await waitUntil(() => errors.length >= 2 && out.count() > during + 20, 60_000, "failed passes while the server is down");
    expect(shipper.lastError).toBeDefined();
    cluster.startServer();
    await waitUntil(async () => {
      const sizes = Object.fromEntries((await store.list(key).catch(() => [])).map((f) => [f.name, f.size]));
      return (sizes["stdout.log"] ?? 0) > Buffer.byteLength(readFileSync(join(dir, "stdout.log"), "utf8")) / 2 && shipper.lastError === undefined;
    }, 60_000, "shipping to go on after the restart");
  } finally {
    out.stop();
    err.stop();
  }
  const report = await shipper.stop({ timeoutMs: 60_000 });
  const local = { out: readFileSync(join(dir, "stdout.log"), "utf8"), err: readFileSync(join(dir, "stderr.log"), "utf8") };
  expect(report.files).toEqual({ "stdout.log": Buffer.byteLength(local.out), "stderr.log": Buffer.byteLength(local.err) });
  expect(await storedText(store, key, "stdout.log")).toBe(local.out);
  expect(await storedText(store, key, "stderr.log")).toBe(local.err);
  expect((await store.list(key)).map((f) => [f.name, f.complete, f.dropped])).toEqual([
    ["stderr.log", true, 0],
    ["stdout.log", true, 0],
  ]);
  // Every line once, in order. Only the final newline is cut: trim() would also take the trailing space of a
  // last line whose number is a multiple of 50 (no x's), which then no longer starts with "out line N ".
  const lines = local.out.replace(/\n$/, "").split("\n");
  expect(lines.length).toBe(out.count());
  expect(lines.every((l, i) => l.startsWith(`out line ${i + 1} `))).toBe(true);
});

test("directory: a file that appears late is shipped; a file replaced by a link is not; a restarted shipper doubles nothing", async () => {
  const store = new DirectoryArtifactStore(makeTempDir("atomic-ship-store-"), 64 * 1024 * 1024);
  const { dir, key } = stageDir();
  const secret = join(makeTempDir("atomic-ship-secret-"), "secret.txt");
  writeFileSync(secret, "do not ship me\n");
  writeFileSync(join(dir, "stdout.log"), "first\n");
  const shipper = shipStageFiles(dir, store, key, { intervalMs: 20 });
  await shipper.flush();
  expect(await storedText(store, key, "stdout.log")).toBe("first\n");
  writeFileSync(join(dir, "transcript.md"), "# late\n");
  symlinkSync(secret, join(dir, "events.jsonl"));
  appendFileSync(join(dir, "stdout.log"), "second\n");
  await waitUntil(async () => (await storedText(store, key, "stdout.log")) === "first\nsecond\n", 10_000, "the second line");
  await shipper.stop();
  expect((await store.list(key)).map((f) => [f.name, f.size, f.complete])).toEqual([
    ["stdout.log", 13, true],
    ["transcript.md", 7, true],
  ]);

  // The host restarts and ships the same attempt again (its files grew meanwhile): only the new bytes go.
  appendFileSync(join(dir, "stdout.log"), "third\n");
  const again = shipStageFiles(dir, store, key, { intervalMs: 20 });
  expect((await again.stop()).files).toEqual({ "stdout.log": 19, "transcript.md": 7 });
  expect(await storedText(store, key, "stdout.log")).toBe("first\nsecond\nthird\n");
  expect(await storedText(store, key, "transcript.md")).toBe("# late\n");

  // The store lost what it had confirmed (as a crashed Postgres loses its last asynchronous commits): the next
  // append is refused as a gap and the shipper sends again from what the store has.
  const lost = shipStageFiles(dir, store, key, { intervalMs: 20 });
  await lost.flush();
  rmSync(join(store.location, key.stage, "stdout.log"));
  appendFileSync(join(dir, "stdout.log"), "fourth\n");
  expect((await lost.stop()).files["stdout.log"]).toBe(26);
  expect(await storedText(store, key, "stdout.log")).toBe("first\nsecond\nthird\nfourth\n");
});
