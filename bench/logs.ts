/**
 * `atomic logs` streams a stage log in bounded memory: the command's peak
 * RSS printing a 70 MB log (to a pipe read as fast as it comes) against
 * printing a 7 MB one, the same binary and journal, alternating. Target:
 * at most 1.5x for ten times the bytes (memory stays flat). Reading the
 * file whole, as it once did, peaked at about 320 MB on the 70 MB log
 * (the file and its decoded copies); streamed it is about 65 MB, of which
 * about 35 MB is the process itself. Also reported: every byte arrived.
 */

import { statSync } from "node:fs";
import { join } from "node:path";
import { WORKFLOWS, atomicBin, binaryEnv, fmt, median, removeTempDir, runTimed, runWithPeakRss, settle, tempDir, type Bench, type Result } from "./lib.ts";

const MB = 70;
const REPS = 3;
const TARGET = 1.5;

const bench: Bench = {
  name: "logs",
  title: `atomic logs of a ${MB} MB stage log: peak RSS vs a ${MB / 10} MB one`,
  async run(): Promise<Result[]> {
    const home = tempDir();
    try {
      const env = binaryEnv(home, { LOGS_MB: String(MB) });
      const run = await runTimed([atomicBin(), "run", join(WORKFLOWS, "logs.ts"), "--json"], { env, capture: true, timeoutMs: 180_000 });
      if (run.code !== 0) throw new Error(`the logs workflow failed (${run.code}): ${run.stderr}`);
      const runId = (JSON.parse(run.stdout.trim().split("\n").at(-1)!) as { runId: string }).runId;
      const big: number[] = [];
      const tenth: number[] = [];
      for (let i = 0; i < REPS; i++) {
        settle();
        tenth.push((await runWithPeakRss([atomicBin(), "logs", runId, "--stage", "tenth"], env)).peakRssMb);
        settle();
        big.push((await runWithPeakRss([atomicBin(), "logs", runId, "--stage", "big"], env)).peakRssMb);
      }
      // Every byte, through a pipe this process reads.
      const all = await runTimed([atomicBin(), "logs", runId, "--stage", "big", "--no-stderr"], { env, capture: true, timeoutMs: 180_000 });
      const file = statSync(join(home, "artifacts", runId, "0-big", "attempt-1", "stdout.log")).size;
      const ratio = median(big) / median(tenth);
      return [
        {
          bench: "logs",
          label: `peak RSS of atomic logs on a ${MB} MB log`,
          value: median(big),
          unit: "MB",
          baseline: { label: `the same on a ${MB / 10} MB log`, value: median(tenth), unit: "MB" },
          ratio: { value: ratio, meaning: `${MB} MB log ÷ ${MB / 10} MB log` },
          target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET },
          notes: [`big: ${big.map((x) => fmt(x)).join(", ")} MB`, `tenth: ${tenth.map((x) => fmt(x)).join(", ")} MB`],
        },
        {
          bench: "logs",
          label: "bytes printed of the big log",
          value: Buffer.byteLength(all.stdout),
          unit: "B",
          baseline: { label: "stdout.log size", value: file, unit: "B" },
          ratio: { value: Buffer.byteLength(all.stdout) / file, meaning: "printed ÷ file" },
          target: { text: "ratio = 1", ok: Buffer.byteLength(all.stdout) === file },
        },
      ];
    } finally {
      removeTempDir(home);
    }
  },
};

export default bench;
