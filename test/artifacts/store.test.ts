/**
 * The artifact store's contract (src/artifacts/store.ts) on every
 * implementation: the Postgres store in a journal's database (a real
 * cluster, a database per test file) and the plain-directory store (a real
 * directory). Append and read back across chunk boundaries; an append of
 * bytes the store has already is harmless (a retry), an overlapping one adds
 * only the new part, a gap is refused; the cap drops the head and keeps the
 * tail, and readers are told how much went; complete; list; deleteRun
 * deletes one run's files only (a dry run counts them); keys that could name another place are
 * refused. On Postgres also: retention's deleteTree takes the tree's files
 * in its transaction.
 */

import { afterAll, afterEach, describe, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { DirectoryArtifactStore } from "../../src/artifacts/directory-store.ts";
import { CHUNK_BYTES, type ArtifactKey, type ArtifactStore } from "../../src/artifacts/store.ts";
import { openJournal } from "../../src/journal/open.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { newRunId } from "../../src/shared/ids.ts";
import { freshDatabase, postgresInstalled } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { startRoot } from "../conformance/backends.ts";

interface StoreKind {
  name: string;
  make(maxFileBytes: number): Promise<ArtifactStore>;
}

const journals: Journal[] = [];
let database: Promise<string> | undefined;

async function pgJournal(): Promise<Journal> {
  database ??= freshDatabase("artifacts");
  const j = await openJournal({ home: makeTempDir("atomic-art-home-"), durability: "full", journalUrl: await database });
  journals.push(j);
  return j;
}

const KINDS: StoreKind[] = [
  { name: "directory", make: async (max) => new DirectoryArtifactStore(makeTempDir("atomic-art-dir-"), max) },
  ...(postgresInstalled() ? [{ name: "postgres", make: async (max: number) => (await pgJournal()).artifactStore!({ maxFileBytes: max }) }] : []),
];

afterEach(() => {
  removeTempDirs();
});
afterAll(async () => {
  for (const j of journals.splice(0)) await j.close();
});

function keyOf(runId = newRunId(), rootId: string = runId, stage = "0-build"): ArtifactKey {
  return { rootId, runId, stage: `${runId}/${stage}/attempt-1` };
}

async function readAll(store: ArtifactStore, key: ArtifactKey, name: string, from = 0, piece = 100_000): Promise<{ offset: number; data: Buffer }> {
  const parts: Uint8Array[] = [];
  let offset = from;
  let start: number | undefined;
  for (;;) {
    const chunk = (await store.read(key, name, offset, piece))!;
    start ??= chunk.offset;
    if (chunk.data.length === 0) break;
    parts.push(chunk.data);
    offset = chunk.offset + chunk.data.length;
  }
  return { offset: start!, data: Buffer.concat(parts) };
}

async function appendInPieces(store: ArtifactStore, key: ArtifactKey, name: string, data: Buffer, piece: number, from = 0): Promise<number> {
  let size = from;
  for (let at = from; at < data.length; at += piece) size = await store.append(key, name, at, data.subarray(at, Math.min(data.length, at + piece)));
  return size;
}

for (const kind of KINDS) {
  describe(kind.name, () => {
    test(`${kind.name}: appends read back from any offset, across chunk boundaries; a missing file reads as undefined`, async () => {
      const store = await kind.make(64 * 1024 * 1024);
      const key = keyOf();
      expect(await store.append(key, "stdout.log", 0, Buffer.from("hello "))).toBe(6);
      expect(await store.append(key, "stdout.log", 6, Buffer.from("world"))).toBe(11);
      const whole = (await store.read(key, "stdout.log", 0, 1000))!;
      expect([whole.offset, Buffer.from(whole.data).toString(), whole.size, whole.dropped, whole.complete]).toEqual([0, "hello world", 11, 0, false]);
      const part = (await store.read(key, "stdout.log", 6, 3))!;
      expect([part.offset, Buffer.from(part.data).toString()]).toEqual([6, "wor"]);
      const end = (await store.read(key, "stdout.log", 50, 10))!;
      expect([end.offset, end.data.length]).toEqual([11, 0]);
      expect(await store.read(key, "stderr.log", 0, 10)).toBeUndefined();
      expect(await store.read(keyOf(), "stdout.log", 0, 10)).toBeUndefined();

      // Odd-sized pieces over several chunks: every byte where it was put.
      const big = randomBytes(3 * CHUNK_BYTES + 12_345);
      expect(await appendInPieces(store, key, "events.jsonl", big, 100_003)).toBe(big.length);
      const back = await readAll(store, key, "events.jsonl", 0, 77_777);
      expect([back.offset, back.data.equals(big)]).toEqual([0, true]);
      const mid = (await store.read(key, "events.jsonl", CHUNK_BYTES - 10, 20))!;
      expect(Buffer.from(mid.data).equals(big.subarray(CHUNK_BYTES - 10, CHUNK_BYTES + 10))).toBe(true);
    });

    test(`${kind.name}: appending bytes the store has is harmless, an overlap adds only the new part, a gap is refused`, async () => {
      const store = await kind.make(64 * 1024 * 1024);
      const key = keyOf();
      await store.append(key, "stdout.log", 0, Buffer.from("line one\n"));
      // A retry of the same append (its COMMIT's answer was lost): nothing doubles.
      expect(await store.append(key, "stdout.log", 0, Buffer.from("line one\n"))).toBe(9);
      expect(await store.append(key, "stdout.log", 5, Buffer.from("one\nline two\n"))).toBe(18);
      expect(await store.append(key, "stdout.log", 2, Buffer.from("ne"))).toBe(18);
      expect(Buffer.from((await store.read(key, "stdout.log", 0, 100))!.data).toString()).toBe("line one\nline two\n");
      const gap = await store.append(key, "stdout.log", 20, Buffer.from("x")).catch((e) => e);
      expect(gap.code).toBe("artifact_gap");
      expect(gap.message).toBe(`cannot append ${key.stage}/stdout.log at offset 20: the store has 18 bytes of it`);
      expect(Buffer.from((await store.read(key, "stdout.log", 0, 100))!.data).toString()).toBe("line one\nline two\n");
    });

    test(`${kind.name}: past the cap the head is dropped and the tail kept; readers are told how much went`, async () => {
      const cap = 2 * CHUNK_BYTES;
      const store = await kind.make(cap);
      expect(store.maxFileBytes).toBe(cap);
      const key = keyOf();
      const data = randomBytes(5 * CHUNK_BYTES + 1_001);
      expect(await appendInPieces(store, key, "stdout.log", data, 90_001)).toBe(data.length);
      const [file] = await store.list(key);
      expect(file!.size).toBe(data.length);
      expect(file!.dropped).toBeGreaterThan(0);
      expect(file!.size - file!.dropped).toBeLessThanOrEqual(cap);
      // Most of the cap is still there (Postgres drops whole chunks; a directory keeps three quarters).
      expect(file!.size - file!.dropped).toBeGreaterThanOrEqual(cap / 2);
      const back = await readAll(store, key, "stdout.log");
      expect(back.offset).toBe(file!.dropped);
      expect(back.data.equals(data.subarray(file!.dropped))).toBe(true);
      // A reader past the dropped head reads on as before; appends go on after the cut.
      const later = (await store.read(key, "stdout.log", data.length - 10, 100))!;
      expect(Buffer.from(later.data).equals(data.subarray(data.length - 10))).toBe(true);
      const more = randomBytes(1000);
      expect(await store.append(key, "stdout.log", data.length, more)).toBe(data.length + 1000);
      // A retry from an offset that was dropped already changes nothing.
      expect(await store.append(key, "stdout.log", 0, data.subarray(0, 100))).toBe(data.length + 1000);
      const tail = (await store.read(key, "stdout.log", data.length - 5, 2000))!;
      expect(Buffer.from(tail.data).equals(Buffer.concat([data.subarray(data.length - 5), more]))).toBe(true);
    });

    test(`${kind.name}: list and complete; deleteRun deletes that run's files only`, async () => {
      const store = await kind.make(64 * 1024 * 1024);
      const rootId = newRunId();
      const key = keyOf(rootId);
      const childId = newRunId();
      const child = keyOf(childId, rootId, "1-kid");
      const other = keyOf();
      await store.append(key, "stdout.log", 0, Buffer.from("out"));
      await store.append(key, "stderr.log", 0, Buffer.from("errors"));
      await store.append(child, "transcript.md", 0, Buffer.from("# hi"));
      await store.append(other, "stdout.log", 0, Buffer.from("other"));
      expect(await store.list(key)).toEqual([
        { name: "stderr.log", size: 6, dropped: 0, complete: false },
        { name: "stdout.log", size: 3, dropped: 0, complete: false },
      ]);
      await store.complete(key, "stdout.log");
      await store.complete(key, "stdout.log");
      await store.complete(key, "events.jsonl"); // no such file: nothing happens
      expect((await store.list(key)).map((f) => [f.name, f.complete])).toEqual([
        ["stderr.log", false],
        ["stdout.log", true],
      ]);
      expect((await store.read(key, "stdout.log", 0, 10))!.complete).toBe(true);
      expect(await store.list(keyOf())).toEqual([]);

      expect(await store.deleteRun(rootId, rootId, { dryRun: true })).toEqual({ files: 2, bytes: 9 });
      expect((await store.list(key)).length).toBe(2);
      expect(await store.deleteRun(rootId, rootId)).toEqual({ files: 2, bytes: 9 });
      expect(await store.list(key)).toEqual([]);
      expect(await store.read(key, "stdout.log", 0, 10)).toBeUndefined();
      expect((await store.list(child)).map((f) => f.name)).toEqual(["transcript.md"]);
      expect(await store.deleteRun(rootId, childId)).toEqual({ files: 1, bytes: 4 });
      expect(Buffer.from((await store.read(other, "stdout.log", 0, 10))!.data).toString()).toBe("other");
      expect(await store.deleteRun(rootId, rootId)).toEqual({ files: 0, bytes: 0 });
    });

    test(`${kind.name}: a key or a name that could name another place is refused`, async () => {
      const store = await kind.make(64 * 1024 * 1024);
      const runId = newRunId();
      const bad = [
        { rootId: runId, runId, stage: `../${runId}/0-x/attempt-1` },
        { rootId: runId, runId, stage: `${runId}/../attempt-1` },
        { rootId: runId, runId, stage: `${runId}/0-x/../../etc` },
        { rootId: runId, runId: newRunId(), stage: `${runId}/0-x/attempt-1` },
      ];
      for (const key of bad) expect((await store.append(key, "stdout.log", 0, Buffer.from("x")).catch((e) => e)).code).toBe("bad_artifact_key");
      for (const name of ["../x", ".hidden", "a/b", ""]) {
        expect((await store.append(keyOf(runId), name, 0, Buffer.from("x")).catch((e) => e)).code).toBe("bad_artifact_key");
      }
    });
  });
}

test.if(postgresInstalled())("postgres: retention's deleteTree takes the tree's artifact files in its transaction, and no other tree's", async () => {
  const journal = await pgJournal();
  const store = journal.artifactStore!({ maxFileBytes: 64 * 1024 * 1024 });
  const { rootId, lease } = await startRoot(journal, "art");
  const kept = await startRoot(journal, "kept");
  await store.append(keyOf(rootId), "stdout.log", 0, randomBytes(CHUNK_BYTES + 5));
  await store.append(keyOf(newRunId(), rootId, "1-kid"), "stdout.log", 0, Buffer.from("kid"));
  await store.append(keyOf(kept.rootId), "stdout.log", 0, Buffer.from("kept"));
  await journal.append(lease, [{ runId: rootId, type: "status_changed", payload: {}, patch: { status: "completed", endedAt: Date.now() } }]);
  await journal.releaseLease(lease);
  const dry = await journal.retention.deleteTree(rootId, () => true, { dryRun: true });
  expect(dry!.rows).toMatchObject({ artifact_files: 2, artifact_chunks: 3 });
  expect((await store.list(keyOf(rootId))).length).toBe(1);
  const deleted = await journal.retention.deleteTree(rootId, () => true);
  expect(deleted!.rows).toMatchObject({ artifact_files: 2, artifact_chunks: 3 });
  expect(await store.list(keyOf(rootId))).toEqual([]);
  expect((await store.list(keyOf(kept.rootId))).map((f) => f.size)).toEqual([4]);
});
