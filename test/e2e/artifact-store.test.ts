/**
 * Reading stage files that exist only in the artifact store, through the
 * real binary (`atomic logs`, `logs --follow`, the status page's transcript
 * API). The remote worker host is simulated as the issue suggests: the
 * test ships a stage's directory to the store (src/artifacts/shipper.ts)
 * and removes the local copy, or keeps the local copy in a directory whose
 * path differs from the one the journal records (as a host's own home
 * does).
 * - Postgres journal (the Postgres store by default): a finished run's
 *   stages are read back by logs and by serve from another home, the same
 *   bytes as they were written; gc deletes them with the run;
 * - `logs --follow` of a running stage whose files grow in the store only:
 *   lines appear as the host ships them, and after the run ends the last
 *   bytes, shipped a moment later, are still printed before logs exits;
 * - SQLite journal with `artifacts.dir` in config.json (the directory
 *   store): logs reads from that directory; gc deletes the run's files
 *   there (a dry run counts them);
 * - past the cap (a directory store of 256 KiB): logs warns how much of
 *   the file is gone and prints from the next whole line; the transcript
 *   API starts at the first kept byte and says how many were dropped;
 * - doctor names the store (and checks a shared directory); a bad
 *   `artifacts` setting is one sentence and a hint, exit 2.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { appendFileSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DirectoryArtifactStore } from "../../src/artifacts/directory-store.ts";
import { artifactStoreFor } from "../../src/artifacts/select.ts";
import { shipStageFiles } from "../../src/artifacts/shipper.ts";
import { artifactKeyOf, type ArtifactStore } from "../../src/artifacts/store.ts";
import { buildRunReport, flattenStages } from "../../src/engine/run-report.ts";
import { openJournal } from "../../src/journal/open.ts";
import type { Journal } from "../../src/journal/journal.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { POSTGRES_URL_ENV, freshDatabase, postgresInstalled } from "../helpers/postgres.ts";
import { startRoot } from "../conformance/backends.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, makeTempDir, startedRunId } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const STEPS = fixture("pg-steps.ts");
const pgTest = postgresInstalled() ? e2eTest : () => {};

/** Ships every stage directory of run `id` (as its host would have) to `store`, then removes the local copies. */
async function shipAndRemove(journal: Journal, store: ArtifactStore, id: string, artifacts: string): Promise<number> {
  const report = (await buildRunReport(journal, id as RunId))!;
  let n = 0;
  for (const st of flattenStages(report)) {
    if (!st.artifactDir) continue;
    await shipStageFiles(st.artifactDir, store, artifactKeyOf(report.run.rootId, st.artifactDir)!, { intervalMs: 20 }).stop();
    n++;
  }
  rmSync(artifacts, { recursive: true });
  return n;
}

pgTest("postgres: a finished run's stage files only in the store: logs and the page read them from another home", async () => {
  const url = await freshDatabase("e2e_art");
  const home = join(makeTempDir("atomic-art-e2e-"), "home");
  const out = join(home, "..", "out");
  mkdirSync(out, { recursive: true });
  const env = { ATOMIC_JOURNAL: url, OUT_DIR: out, STEPS: "1", DELAY_MS: "1", [POSTGRES_URL_ENV]: undefined as unknown as string };
  const r = await runAtomic(["run", STEPS], { home, env });
  expect(r.code).toBe(0);
  const id = startedRunId(r.stdout);
  const journal = await openJournal({ home, durability: "full", journalUrl: url });
  try {
    expect(await shipAndRemove(journal, artifactStoreFor(journal, {})!, id, join(home, "artifacts"))).toBe(4);
  } finally {
    await journal.close();
  }
  const other = join(makeTempDir(), "home");
  const all = await runAtomic(["logs", id], { home: other, env: { ATOMIC_JOURNAL: url } });
  expect([all.code, all.stderr]).toEqual([0, ""]);
  expect(all.stdout.split("\n").filter(Boolean).sort()).toEqual(["[alpha] alpha", "[beta] beta", "[gamma] gamma", "[last] done"]);
  const beta = await runAtomic(["logs", id, "--stage", "beta"], { home: other, env: { ATOMIC_JOURNAL: url } });
  expect([beta.code, beta.stdout, beta.stderr]).toEqual([0, "beta\n", ""]);
  const doctor = await runAtomic(["doctor", "--json"], { home: other, env: { ATOMIC_JOURNAL: url } });
  expect(JSON.parse(doctor.stdout).artifacts).toMatchObject({ store: "journal", ok: true, detail: "in the journal's database, files capped at 64.0 MiB" });

  const proc = spawnAtomic(["serve", "--port", "0"], { home: other, env: { ATOMIC_JOURNAL: url } });
  const lines = lineWatcher(proc.stdout);
  const login = (await lines.waitFor(/^status page: /)).slice("status page: ".length).trim();
  const m = /^(http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(login)!;
  const t = (await (await fetch(`${m[1]}api/runs/${id}/stages/beta/transcript`, { headers: { authorization: `Bearer ${m[2]}` } })).json()) as {
    stdout: { text: string; missing: boolean; dropped: number };
  };
  expect(t.stdout).toMatchObject({ text: "beta\n", missing: false, dropped: 0 });
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(0);

  // gc deletes the run's files in the store in the run's own transaction.
  const gc = await runAtomic(["gc", "--older-than", "0s", "--json"], { home: other, env: { ATOMIC_JOURNAL: url } });
  expect(JSON.parse(gc.stdout)).toMatchObject({ runs: 1, rowsByTable: { artifact_files: expect.any(Number), artifact_chunks: expect.any(Number) } });
  expect(JSON.parse(gc.stdout).rowsByTable.artifact_files).toBeGreaterThanOrEqual(4);
});

pgTest("postgres: logs --follow follows a remote stage's file as it grows in the store, and prints its last bytes shipped after the run ended", async () => {
  const url = await freshDatabase("e2e_art");
  const journal = await openJournal({ home: join(makeTempDir("atomic-art-root-"), "home"), durability: "full", journalUrl: url });
  try {
    const store = artifactStoreFor(journal, {})!;
    // The run as a root with a worker host would record it: the stage's directory is under the host's own home.
    const { rootId, lease } = await startRoot(journal, "remote");
    const recorded = `/home/of-another-host/.atomic/artifacts/${rootId}/0-build/attempt-1`;
    await journal.append(lease, [
      { runId: rootId, type: "step_started", key: "0", payload: { kind: "stage", name: "build", args: "d", attempt: 1, artifactDir: recorded } },
    ]);
    const local = join(makeTempDir("atomic-art-host-"), "artifacts", rootId, "0-build", "attempt-1");
    mkdirSync(local, { recursive: true });
    writeFileSync(join(local, "stdout.log"), "one\n");
    const shipper = shipStageFiles(local, store, artifactKeyOf(rootId, recorded)!, { intervalMs: 50 });
    await shipper.flush();

    const proc = spawnAtomic(["logs", rootId, "--stage", "build", "--follow"], { home: join(makeTempDir(), "home"), env: { ATOMIC_JOURNAL: url } });
    const out = lineWatcher(proc.stdout);
    const err = new Response(proc.stderr).text();
    await out.waitFor(/^one$/);
    appendFileSync(join(local, "stdout.log"), "two\n");
    await out.waitFor(/^two$/);
    appendFileSync(join(local, "stdout.log"), "thr");
    await Bun.sleep(300);
    appendFileSync(join(local, "stdout.log"), "ee\n");
    await out.waitFor(/^three$/);

    // The stage ends and the run with it; the host writes and ships the last line a moment later.
    const result = { status: "completed", text: "", exitCode: 0, outputPath: `${recorded}/stdout.log` };
    await journal.append(lease, [
      { runId: rootId, type: "checkpoint", key: "0", payload: { kind: "stage", name: "build", args: "d", result } },
      { runId: rootId, type: "status_changed", payload: {}, patch: { status: "completed", endedAt: Date.now() } },
    ]);
    await journal.releaseLease(lease);
    await Bun.sleep(600);
    appendFileSync(join(local, "stdout.log"), "four, after the end\n");
    await shipper.stop();
    expect(await proc.exited).toBe(0);
    expect(await err).toBe("");
    expect(out.lines).toEqual(["one", "two", "three", "four, after the end"]);
  } finally {
    await journal.close();
  }
});

e2eTest("sqlite with artifacts.dir: logs reads a stage's files from the shared directory when the local copy is gone", async () => {
  const home = join(makeTempDir("atomic-art-dir-"), "home");
  const shared = join(home, "..", "shared");
  const out = join(home, "..", "out");
  mkdirSync(out, { recursive: true });
  mkdirSync(home, { recursive: true, mode: 0o700 });
  writeFileSync(join(home, "config.json"), JSON.stringify({ artifacts: { dir: shared } }));
  const env = { OUT_DIR: out, STEPS: "1", DELAY_MS: "1", ATOMIC_JOURNAL: undefined };
  const r = await runAtomic(["run", STEPS], { home, env });
  expect(r.code).toBe(0);
  const id = startedRunId(r.stdout);
  const journal = await openJournal({ home, durability: "full" });
  try {
    expect(await shipAndRemove(journal, new DirectoryArtifactStore(shared, 64 * 1024 * 1024), id, join(home, "artifacts"))).toBe(4);
  } finally {
    await journal.close();
  }
  const beta = await runAtomic(["logs", id, "--stage", "beta"], { home, env });
  expect([beta.code, beta.stdout, beta.stderr]).toEqual([0, "beta\n", ""]);
  // Without the setting the files are nowhere this machine looks.
  writeFileSync(join(home, "config.json"), "{}");
  const gone = await runAtomic(["logs", id, "--stage", "beta"], { home, env });
  expect([gone.code, gone.stdout]).toEqual([0, ""]);
  expect(gone.stderr).toMatch(/^warning: the output of stage beta is not on this machine \(\S+\): it stays on the machine/);

  // gc takes the run's files in the shared directory with the run (a dry run counts them and keeps them).
  writeFileSync(join(home, "config.json"), JSON.stringify({ artifacts: { dir: shared } }));
  const stored = readdirSync(join(shared, id), { recursive: true, withFileTypes: true }).filter((e) => e.isFile() && !e.name.startsWith(".")).length;
  expect(stored).toBeGreaterThanOrEqual(4);
  const dry = await runAtomic(["gc", "--older-than", "0s", "--dry-run", "--json"], { home, env });
  expect(JSON.parse(dry.stdout)).toMatchObject({ runs: 1, artifactFiles: stored });
  expect(existsSync(join(shared, id))).toBe(true);
  const gc = await runAtomic(["gc", "--older-than", "0s", "--json"], { home, env });
  expect(JSON.parse(gc.stdout)).toMatchObject({ runs: 1, artifactFiles: stored });
  expect(existsSync(join(shared, id))).toBe(false);
});

e2eTest("artifacts in config.json: doctor names the store and checks a shared directory; a bad setting is one sentence and a hint, exit 2", async () => {
  const home = join(makeTempDir("atomic-art-doc-"), "home");
  mkdirSync(home, { recursive: true, mode: 0o700 });
  const env = { ATOMIC_JOURNAL: undefined };
  const doctor = async () => {
    const r = await runAtomic(["doctor", "--json"], { home, env });
    return { code: r.code, artifacts: (JSON.parse(r.stdout) as { artifacts: Record<string, unknown> }).artifacts };
  };
  expect((await doctor()).artifacts).toMatchObject({ store: "local", ok: true });
  const shared = join(home, "..", "shared");
  writeFileSync(join(home, "config.json"), JSON.stringify({ artifacts: { dir: shared, maxFileBytes: 1048576 } }));
  expect(await doctor()).toMatchObject({
    code: 1,
    artifacts: { store: "directory", location: shared, ok: false, problem: `the artifacts directory ${shared} does not exist`, hint: "mount the shared filesystem there, or change artifacts.dir in config.json" },
  });
  mkdirSync(shared);
  expect((await doctor()).artifacts).toMatchObject({ store: "directory", ok: true, maxFileBytes: 1048576, detail: "a shared directory, files capped at 1.0 MiB" });

  for (const [artifacts, message] of [
    [{ dir: "relative/dir" }, `"artifacts.dir" in ${join(home, "config.json")} must be an absolute path (a directory every host mounts)`],
    [{ maxFileBytes: 1000 }, `"artifacts.maxFileBytes" in ${join(home, "config.json")} must be a whole number of bytes, at least 262144`],
  ] as const) {
    writeFileSync(join(home, "config.json"), JSON.stringify({ artifacts }));
    const r = await runAtomic(["doctor"], { home, env });
    expect([r.code, r.stdout, r.stderr]).toEqual([2, "", `error: ${message}.\nhint: see "artifacts" in docs/reference/config.md\n`]);
  }
});

e2eTest("past the cap: logs says how much of the file is gone and prints from the next whole line; the transcript API starts after the dropped bytes", async () => {
  const home = join(makeTempDir("atomic-art-cap-"), "home");
  const shared = join(home, "..", "shared");
  mkdirSync(shared, { recursive: true });
  mkdirSync(home, { recursive: true, mode: 0o700 });
  const cap = 256 * 1024;
  writeFileSync(join(home, "config.json"), JSON.stringify({ artifacts: { dir: shared, maxFileBytes: cap } }));
  const env = { LINES: "100000", ATOMIC_JOURNAL: undefined };
  const r = await runAtomic(["run", fixture("numbered.ts")], { home, env });
  expect(r.code).toBe(0);
  const id = startedRunId(r.stdout);
  const full = Array.from({ length: 100_000 }, (_, i) => `${i + 1}\n`).join("");
  const store = new DirectoryArtifactStore(shared, cap);
  const journal = await openJournal({ home, durability: "full" });
  let dropped = 0;
  try {
    const report = (await buildRunReport(journal, id as RunId))!;
    const dir = flattenStages(report)[0]!.artifactDir!;
    await shipAndRemove(journal, store, id, join(home, "artifacts"));
    const [stdout] = (await store.list(artifactKeyOf(id, dir)!)).filter((f) => f.name === "stdout.log");
    expect(stdout!.size).toBe(full.length);
    dropped = stdout!.dropped;
    expect(dropped).toBeGreaterThan(0);
  } finally {
    await journal.close();
  }
  const logs = await runAtomic(["logs", id, "--stage", "lines"], { home, env });
  expect(logs.code).toBe(0);
  expect(logs.stderr).toBe(
    `warning: the first ${(dropped / 1024).toFixed(1)} KiB of the stdout of stage lines are not kept: the artifact store keeps the last 256.0 KiB of a file (artifacts.maxFileBytes); printing from the next whole line\n`,
  );
  expect(logs.stdout).toBe(full.slice(full.indexOf("\n", dropped) + 1));

  const proc = spawnAtomic(["serve", "--port", "0"], { home, env });
  const lines = lineWatcher(proc.stdout);
  const login = (await lines.waitFor(/^status page: /)).slice("status page: ".length).trim();
  const m = /^(http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(login)!;
  const t = (await (await fetch(`${m[1]}api/runs/${id}/stages/lines/transcript?stdout=0`, { headers: { authorization: `Bearer ${m[2]}` } })).json()) as {
    stdout: { offset: number; dropped: number; size: number; text: string };
  };
  expect(t.stdout).toMatchObject({ offset: dropped, dropped, size: full.length });
  expect(t.stdout.text).toBe(full.slice(dropped, dropped + t.stdout.text.length));
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(0);
});
