/**
 * Recovery: a run of 2,000 no-op steps is killed with SIGKILL right after
 * its 1,000th checkpoint (fault point ATOMIC_FAULT_POINTS=after-checkpoint:1000,
 * in the real binary, synchronous=FULL), then resumed with the real binary.
 *
 * Measured: from spawning `dist/atomic --json resume <id>` to the first
 * NDJSON `step_ended` event with `replayed: false` on its stdout (the first
 * new step, checkpoint committed). The resume process is then SIGKILLed
 * too, so the run stays crashed for the next sample (each sample replays
 * the 1,000 recorded steps plus the few the previous one finished).
 *
 * Baseline, alternating in the same run: the startup of `dist/atomic --help`.
 * Target: median time to the first new step at most 5x the median startup.
 */

import {
  atomicBin,
  binaryEnv,
  fmt,
  median,
  readNdjson,
  removeTempDir,
  runTimed,
  settle,
  spawnTracked,
  spread,
  tempDir,
  WORKFLOWS,
  type Bench,
  type Result,
} from "./lib.ts";
import { join } from "node:path";

const STEPS = 2_000;
const KILL_AT = 1_000;
const REPS = 7;
const TARGET = 5;

interface ResumeSample {
  ms: number;
  replayed: number;
}

async function resumeToFirstNewStep(bin: string, home: string, runId: string): Promise<ResumeSample> {
  const t0 = performance.now();
  const proc = spawnTracked([bin, "--json", "resume", runId], { env: binaryEnv(home), stdout: "pipe", stderr: "pipe" });
  let replayed = 0;
  let at: number | undefined;
  try {
    const found = await readNdjson(proc.stdout as ReadableStream<Uint8Array>, (e) => {
      if (e.type !== "step_ended" || e.runId !== runId) return false;
      if (e.replayed === true) {
        replayed++;
        return false;
      }
      at = performance.now();
      return true;
    });
    if (!found || at === undefined) {
      const err = await new Response(proc.stderr as ReadableStream).text();
      throw new Error(`atomic resume ${runId} ended without a new step: ${err.slice(-500)}`);
    }
  } finally {
    proc.kill("SIGKILL");
    await proc.exited;
  }
  return { ms: at - t0, replayed };
}

const bench: Bench = {
  name: "recovery",
  title: `SIGKILL at step ${fmt(KILL_AT, 0)} of ${fmt(STEPS, 0)}, resume to the first new step vs dist/atomic --help startup`,
  async run(): Promise<Result[]> {
    const home = tempDir();
    try {
      const bin = atomicBin();
      const crashed = await runTimed([bin, "--json", "run", join(WORKFLOWS, "steps.ts"), "--input", `steps=${STEPS}`], {
        env: binaryEnv(home, { ATOMIC_FAULT_POINTS: `after-checkpoint:${KILL_AT}` }),
        capture: true,
      });
      if (crashed.signal !== "SIGKILL") {
        throw new Error(`the run was meant to die by SIGKILL at checkpoint ${KILL_AT}; it exited ${crashed.code} ${crashed.signal}: ${crashed.stderr.slice(-500)}`);
      }
      const started = crashed.stdout
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as { type: string; runId: string; parentId: string | null })
        .find((e) => e.type === "run_started" && e.parentId === null);
      if (!started) throw new Error(`no run_started event in the crashed run's output: ${crashed.stdout.slice(0, 500)}`);
      const runId = started.runId;

      // Warm-up: page cache for the binary and the journal.
      await runTimed([bin, "--help"]);
      await resumeToFirstNewStep(bin, home, runId);

      const help: number[] = [];
      const resume: ResumeSample[] = [];
      for (let i = 0; i < REPS; i++) {
        settle();
        help.push((await runTimed([bin, "--help"], { env: binaryEnv(home) })).ms);
        settle();
        resume.push(await resumeToFirstNewStep(bin, home, runId));
      }
      const helpMs = median(help);
      const resumeMs = median(resume.map((r) => r.ms));
      const ratio = resumeMs / helpMs;
      return [
        {
          bench: "recovery",
          label: `recovery: resume start to first new step after SIGKILL at step ${fmt(KILL_AT, 0)} of ${fmt(STEPS, 0)} (dist/atomic, synchronous=FULL)`,
          value: resumeMs,
          unit: "ms",
          baseline: { label: "startup of dist/atomic --help", value: helpMs, unit: "ms" },
          ratio: { value: ratio, meaning: "time to first new step ÷ --help startup" },
          target: { text: `ratio <= ${TARGET}`, ok: ratio <= TARGET },
          notes: [
            `resume to first new step: ${spread(resume.map((r) => r.ms))}`,
            `--help: ${spread(help)}`,
            `steps replayed before the first new one: ${resume.map((r) => r.replayed).join(", ")}`,
          ],
        },
      ];
    } finally {
      removeTempDir(home);
    }
  },
};

export default bench;
