/**
 * A stage that prints a lot (issue 12, item 11), through the real binary:
 * the root's memory must not grow with a stage's output.
 *
 * Live output flows worker → coordinator → root over IPC, and each hop
 * caps it at 64 Ki characters of text per stage per batch (about every
 * 250 ms; src/pool/event-batcher.ts); the stage's log files, written by the
 * worker's runner, keep everything. Before the cap, the 200 MB stage below
 * raised the root's peak RSS from about 56 MB to 520 MB (ratio 9.2): each
 * batch carried everything printed in 250 ms, parsed whole at every hop.
 * With it, about 48 against 46 MB (ratio 1.04).
 *
 * Subject: one shell stage printing 200 MB (`head -c … /dev/zero | tr |
 * fold`, 100-character lines) on a 1-worker pool; baseline: the same stage
 * printing 2 MB, alternating (baseline, subject) 3 times. Figure: the
 * root's peak RSS (VmHWM of the `atomic run` process, polled from /proc
 * every 5 ms until it exits) for each, medians compared. Target: the
 * 200 MB stage's root peak at most 1.25x the 2 MB one's: flat, whatever the
 * stage prints, allowing for the noise of a garbage-collected process (100
 * times the output within 25 % of the memory). The home is on disk: 200 MB
 * of log per run would fill a small /dev/shm.
 */

import { join } from "node:path";
import { WORKFLOWS, alternate, atomicBin, binaryEnv, fmt, median, removeTempDir, spawnTracked, tempDir, watchPeakRss, type Bench, type Result } from "./lib.ts";

const SUBJECT_MB = 200;
const BASELINE_MB = 2;
const REPS = 3;
const TARGET = 1.25;

/** Runs one stage printing `mb` MB; returns the root's peak RSS in MB. */
async function rootPeak(bin: string, mb: number): Promise<number> {
  const home = tempDir("atomic-bench-output-");
  try {
    const command = `head -c ${mb * 1_000_000} /dev/zero | tr '\\0' x | fold -w 99`;
    const proc = spawnTracked([bin, "run", join(WORKFLOWS, "pool.ts"), "--input", "n=1", "--input", `command=${command}`, "--workers", "1"], {
      env: binaryEnv(home),
      stdout: "ignore",
      stderr: "pipe",
    });
    const peak = watchPeakRss(proc.pid);
    const stderr = await new Response(proc.stderr as ReadableStream).text();
    await proc.exited;
    const peakMb = peak.stop();
    if (proc.exitCode !== 0) throw new Error(`the ${mb} MB run failed (exit ${proc.exitCode}): ${stderr.slice(-2000)}`);
    return peakMb;
  } finally {
    removeTempDir(home);
  }
}

const bench: Bench = {
  name: "output",
  title: `root memory while a stage prints ${SUBJECT_MB} MB (live output capped per batch)`,
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    const samples = await alternate(REPS, {
      baseline: () => rootPeak(bin, BASELINE_MB),
      subject: () => rootPeak(bin, SUBJECT_MB),
    });
    const base = median(samples.baseline);
    const subject = median(samples.subject);
    const ratio = subject / base;
    return [
      {
        bench: "output",
        label: `root peak RSS, a stage printing ${SUBJECT_MB} MB`,
        value: subject,
        unit: "MB",
        baseline: { label: `the same stage printing ${BASELINE_MB} MB`, value: base, unit: "MB" },
        ratio: { value: ratio, meaning: `root peak RSS (${SUBJECT_MB} MB printed) / root peak RSS (${BASELINE_MB} MB printed), medians of ${REPS}` },
        target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET },
        notes: [`samples: ${SUBJECT_MB} MB ${samples.subject.map((x) => fmt(x, 1)).join(", ")}; ${BASELINE_MB} MB ${samples.baseline.map((x) => fmt(x, 1)).join(", ")}`],
      },
    ];
  },
};

export default bench;
