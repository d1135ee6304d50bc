/**
 * The artifact store's append throughput, against writing the same bytes
 * to a local file (information only: the issue sets no target).
 *
 * A stage's output shipped the way the shipper sends it
 * (src/artifacts/shipper.ts): TOTAL bytes in appends of PIECE bytes, one
 * after the other, to (a) the Postgres store in a journal on a throw-away
 * cluster (test/helpers/postgres.ts; each append is a transaction that
 * locks the file's row, fills the last chunk and adds new ones), (b) the
 * directory store on a local temp directory. Baseline in the same run: the
 * same appends with `appendFileSync` to a local file (what the stage's own
 * writes cost; no fsync, as neither store syncs). Alternating, medians, MB/s.
 *
 * What it means for users: a local append is a copy into the page cache, a
 * Postgres append a round trip and a commit that also rewrites the file's
 * last (partial) chunk, so the ratio is far below 1. Measured here (a
 * loaded 2-core machine, so rough): Postgres about 25 MB/s (0.013 of the
 * local file), the directory store about 0.7; a stage writing 1 MB/s uses
 * a few percent of what the Postgres store takes.
 */

import { appendFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { DirectoryArtifactStore } from "../src/artifacts/directory-store.ts";
import type { ArtifactKey, ArtifactStore } from "../src/artifacts/store.ts";
import { PostgresJournal } from "../src/journal/postgres/postgres-journal.ts";
import { newRunId } from "../src/shared/ids.ts";
import { startCluster, type Cluster } from "../test/helpers/postgres.ts";
import { alternate, fmt, median, spread, tempDir, type Bench, type Result } from "./lib.ts";

const TOTAL = 16 * 1024 * 1024;
const PIECE = 64 * 1024;
const REPS = 3;

function freshKey(): ArtifactKey {
  const runId = newRunId();
  return { rootId: runId, runId, stage: `${runId}/0-bench/attempt-1` };
}

/** MB/s of TOTAL bytes appended in PIECE-byte appends through `append`. */
async function rate(append: (offset: number, data: Uint8Array) => Promise<unknown> | unknown): Promise<number> {
  const piece = Buffer.alloc(PIECE, "x\n");
  const t0 = performance.now();
  for (let at = 0; at < TOTAL; at += PIECE) await append(at, piece);
  return TOTAL / 1e6 / ((performance.now() - t0) / 1000);
}

function viaStore(store: ArtifactStore): () => Promise<number> {
  return () => {
    const key = freshKey();
    return rate((offset, data) => store.append(key, "stdout.log", offset, data));
  };
}

const bench: Bench = {
  name: "artifacts",
  title: "artifact store appends (Postgres, directory) against appends to a local file",
  async run(): Promise<Result[]> {
    let cluster: Cluster | undefined;
    let journal: PostgresJournal | undefined;
    try {
      cluster = await startCluster({ durable: true });
      journal = await PostgresJournal.open(`${cluster.adminUrl}?schema=bench`);
      const pg = journal.artifactStore({ maxFileBytes: 64 * 1024 * 1024 });
      const dir = new DirectoryArtifactStore(tempDir("atomic-bench-art-"), 64 * 1024 * 1024);
      const local = tempDir("atomic-bench-local-");
      const samples = await alternate(REPS, {
        postgres: viaStore(pg),
        directory: viaStore(dir),
        file: () => {
          const path = join(local, newRunId(), "stdout.log");
          mkdirSync(join(path, ".."), { recursive: true });
          return rate((_offset, data) => appendFileSync(path, data));
        },
      });
      const base = median(samples.file);
      const baseline = { label: "appendFileSync to a local file", value: base, unit: "MB/s" };
      const row = (which: "postgres" | "directory", label: string): Result => ({
        bench: "artifacts",
        label,
        value: median(samples[which]),
        unit: "MB/s",
        baseline,
        ratio: { value: median(samples[which]) / base, meaning: "store throughput / local file throughput" },
        notes: [`${fmt(TOTAL / 1024 / 1024)} MiB in ${PIECE / 1024} KiB appends; ${which}: ${spread(samples[which], "MB/s")}; file: ${spread(samples.file, "MB/s")}`],
      });
      return [row("postgres", "Postgres artifact store appends"), row("directory", "directory artifact store appends")];
    } finally {
      await journal?.close();
      cluster?.stop();
    }
  },
};

export default bench;
