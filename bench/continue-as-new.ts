/**
 * A long-lived loop in bounded runs (ctx.continueAsNew, issue 26) at scale,
 * through `dist/atomic`: bench/workflows/continues.ts, a loop of no-op tool
 * steps that continues as a new run every 10,000 steps.
 *
 * Targets (the same loop at 200,000 steps, a chain of 20 runs, against
 * 20,000 steps, a chain of 2, measured in this run):
 * - `atomic resume` of the chain's first run (it follows the chain to its
 *   last run and replays that run's 10,000 steps; the gate at the loop's end
 *   is closed, so each resume ends failed there and the next can start
 *   again), spawn to exit, alternating 200,000 and 20,000, medians: at most
 *   1.2x;
 * - the peak RSS of those resumes, and of the `atomic run` that made each
 *   chain (/usr/bin/time -v): at most 1.2x.
 *
 * And a correctness check at the full size (the scale test; the
 * suite's test/e2e/continue-as-new.test.ts runs the same at 500 steps):
 * the 200,000-step loop killed with SIGKILL at three random steps, each time
 * resumed from the chain's first run, ends with the outputs of the
 * uninterrupted run (the gated chain above, its gate opened), in exactly 20
 * runs, none holding more than 10,000 step checkpoints. A check that fails
 * throws: the benchmark breaks rather than report figures of a wrong run.
 */

import { Database } from "bun:sqlite";
import { join } from "node:path";
import { WORKFLOWS, atomicBin, binaryEnv, fmt, median, removeTempDir, runTimed, runWithPeakRss, spread, tempDir, type Bench, type Result } from "./lib.ts";

const EVERY = 10_000;
const SMALL = 20_000;
const LARGE = 200_000;
const REPS = 5;
const TARGET = 1.2;
const KILLS = 3;
const FLOW = join(WORKFLOWS, "continues.ts");
/** Longest one `atomic run` or `resume` of the whole loop may take (minutes on a busy 2-CPU machine). */
const RUN_TIMEOUT_MS = 600_000;

/** The loop's outputs, computed here. */
function expected(total: number): { done: number; sum: number } {
  let sum = 0;
  for (let i = 0; i < total; i++) sum += (i * i) % 7;
  return { done: total, sum };
}

/** The chain's runs, oldest first, each with its status and how many loop step checkpoints it holds (the gate's aside). */
function chain(home: string): { id: string; status: string; error: string | null; steps: number }[] {
  const db = new Database(join(home, "atomic.db"), { readonly: true });
  try {
    return db
      .query<{ id: string; status: string; error: string | null; steps: number }, []>(
        `select r.id, r.status, r.error, (select count(*) from events e where e.run_id = r.id and e.type = 'checkpoint' and json_extract(e.payload, '$.name') = 'step') as steps
           from runs r where r.parent_id is null order by r.created_at, r.id`,
      )
      .all();
  } finally {
    db.close();
  }
}

/** Checks `home` holds one chain of `total / EVERY` runs, every one but the last continued, none over EVERY steps. */
function expectChain(home: string, total: number, last: string): string {
  const runs = chain(home);
  const want = total / EVERY;
  if (runs.length !== want) throw new Error(`${total} steps made ${runs.length} runs, expected ${want}`);
  runs.forEach((r, i) => {
    const status = i < want - 1 ? (r.status === "completed" && r.error?.includes("continued_as_new") ? "continued" : r.status) : r.status;
    const expectStatus = i < want - 1 ? "continued" : last;
    if (status !== expectStatus) throw new Error(`run ${i + 1} of ${want} (${r.id}) is ${status}, expected ${expectStatus}`);
    if (r.steps > EVERY) throw new Error(`run ${r.id} holds ${r.steps} step checkpoints, more than ${EVERY}`);
  });
  return runs[0]!.id;
}

/** The outputs of the chain's last run, as stored. */
function lastOutputs(home: string): unknown {
  const db = new Database(join(home, "atomic.db"), { readonly: true });
  try {
    const row = db.query<{ outputs: string | null }, []>("select outputs from runs where parent_id is null order by created_at desc, id desc limit 1").get();
    return row?.outputs ? JSON.parse(row.outputs) : undefined;
  } finally {
    db.close();
  }
}

const bench: Bench = {
  name: "continue-as-new",
  title: `a continue-as-new loop of ${fmt(LARGE, 0)} steps (every ${fmt(EVERY, 0)}) vs ${fmt(SMALL, 0)}: resume time and RSS; kill -9 at random points`,
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    const homes: Record<number, string> = { [SMALL]: tempDir("atomic-bench-can-"), [LARGE]: tempDir("atomic-bench-can-") };
    const killedHome = tempDir("atomic-bench-can-");
    const closed = (home: string, extra: Record<string, string> = {}) => binaryEnv(home, { ATOMIC_BENCH_GATE: "closed", ...extra });
    try {
      // The two chains, each ended failed at the closed gate after its last run's steps.
      const made: Record<number, Awaited<ReturnType<typeof runWithPeakRss>>> = {};
      const first: Record<number, string> = {};
      for (const n of [SMALL, LARGE]) {
        made[n] = await runWithPeakRss([bin, "--quiet", "run", FLOW, "--input", `total=${n}`, "--input", `every=${EVERY}`, "--input", "gate=true"], closed(homes[n]!), RUN_TIMEOUT_MS);
        if (made[n]!.code !== 1) throw new Error(`atomic run of ${n} steps exited ${made[n]!.code}, expected 1 (failed at the gate): ${made[n]!.stderr.slice(-500)}`);
        first[n] = expectChain(homes[n]!, n, "failed");
      }

      // Resume of each chain from its first run, alternating.
      const resumes: Record<number, { ms: number[]; rss: number[] }> = { [SMALL]: { ms: [], rss: [] }, [LARGE]: { ms: [], rss: [] } };
      for (let i = 0; i < REPS; i++) {
        for (const n of [SMALL, LARGE]) {
          const r = await runWithPeakRss([bin, "--quiet", "resume", first[n]!], closed(homes[n]!));
          if (r.code !== 1) throw new Error(`atomic resume of the ${n}-step chain exited ${r.code}, expected 1 (failed at the gate): ${r.stderr.slice(-500)}`);
          resumes[n]!.ms.push(r.ms);
          resumes[n]!.rss.push(r.peakRssMb);
        }
      }
      const resumeRatio = median(resumes[LARGE]!.ms) / median(resumes[SMALL]!.ms);
      const resumeRss = Math.max(...resumes[LARGE]!.rss) / Math.max(...resumes[SMALL]!.rss);
      const runRss = made[LARGE]!.peakRssMb / made[SMALL]!.peakRssMb;

      // The uninterrupted outputs: the large chain's gate opened.
      const opened = await runTimed([bin, "--quiet", "resume", first[LARGE]!], { env: binaryEnv(homes[LARGE]!), capture: true, timeoutMs: RUN_TIMEOUT_MS });
      if (opened.code !== 0) throw new Error(`atomic resume with the gate open exited ${opened.code}: ${opened.stderr.slice(-500)}`);
      const uninterrupted = lastOutputs(homes[LARGE]!);
      if (JSON.stringify(uninterrupted) !== JSON.stringify(expected(LARGE))) throw new Error(`the loop ended with ${JSON.stringify(uninterrupted)}, expected ${JSON.stringify(expected(LARGE))}`);
      expectChain(homes[LARGE]!, LARGE, "completed");

      // The same loop killed with SIGKILL at KILLS random steps, each time resumed from the first run.
      const killedAt: number[] = [];
      const kill = () => 1 + Math.floor(Math.random() * (LARGE / (KILLS + 1)));
      const start = [bin, "--quiet", "run", FLOW, "--input", `total=${LARGE}`, "--input", `every=${EVERY}`];
      let killedMs = 0;
      let firstKilled = "";
      for (let k = 0; k <= KILLS; k++) {
        const at = kill();
        const cmd = k === 0 ? start : [bin, "--quiet", "resume", firstKilled];
        const r = await runTimed(cmd, { env: binaryEnv(killedHome, k < KILLS ? { ATOMIC_FAULT_POINTS: `after-checkpoint:${at}` } : {}), capture: true, timeoutMs: RUN_TIMEOUT_MS });
        killedMs += r.ms;
        if (k === 0) firstKilled = chain(killedHome)[0]!.id;
        if (k < KILLS) {
          if (!r.stderr.includes(`[fault] after-checkpoint #${at}: SIGKILL`)) throw new Error(`the ${k + 1}. kill did not happen (exit ${r.code}): ${r.stderr.slice(-500)}`);
          killedAt.push(at);
        } else {
          if (r.code !== 0) throw new Error(`the last resume exited ${r.code}: ${r.stderr.slice(-500)}`);
          const outputs = lastOutputs(killedHome);
          if (JSON.stringify(outputs) !== JSON.stringify(uninterrupted)) throw new Error(`killed and resumed, the loop ended with ${JSON.stringify(outputs)}, the uninterrupted run with ${JSON.stringify(uninterrupted)}`);
        }
      }
      expectChain(killedHome, LARGE, "completed");
      const killedNote =
        `scale check: ${fmt(LARGE, 0)} steps killed with SIGKILL after ${killedAt.map((a) => fmt(a, 0)).join(", ")} new steps of successive drives, ` +
        `each resumed from the first run: outputs equal the uninterrupted run's, ${LARGE / EVERY} runs, none over ${fmt(EVERY, 0)} steps (${fmt(killedMs / 1000, 1)} s in all)`;

      return [
        {
          bench: "continue-as-new",
          label: `atomic resume of a ${fmt(LARGE, 0)}-step chain (${LARGE / EVERY} runs) from its first run, spawn to exit`,
          value: median(resumes[LARGE]!.ms),
          unit: "ms",
          baseline: { label: `the same of a ${fmt(SMALL, 0)}-step chain (${SMALL / EVERY} runs)`, value: median(resumes[SMALL]!.ms), unit: "ms" },
          ratio: { value: resumeRatio, meaning: `resume(${fmt(LARGE, 0)}) ÷ resume(${fmt(SMALL, 0)}); each replays the last run's ${fmt(EVERY, 0)} steps` },
          target: { text: `ratio <= ${TARGET}`, ok: resumeRatio <= TARGET },
          notes: [`${fmt(LARGE, 0)}: ${spread(resumes[LARGE]!.ms)}`, `${fmt(SMALL, 0)}: ${spread(resumes[SMALL]!.ms)}`, killedNote],
        },
        {
          bench: "continue-as-new",
          label: `peak RSS of those resumes, ${fmt(LARGE, 0)} steps`,
          value: Math.max(...resumes[LARGE]!.rss),
          unit: "MB",
          baseline: { label: `${fmt(SMALL, 0)} steps`, value: Math.max(...resumes[SMALL]!.rss), unit: "MB" },
          ratio: { value: resumeRss, meaning: "highest peak ÷ highest peak" },
          target: { text: `ratio <= ${TARGET}`, ok: resumeRss <= TARGET },
          notes: [`${fmt(LARGE, 0)}: ${spread(resumes[LARGE]!.rss, "MB")}`, `${fmt(SMALL, 0)}: ${spread(resumes[SMALL]!.rss, "MB")}`, `measured with ${made[SMALL]!.how}`],
        },
        {
          bench: "continue-as-new",
          label: `peak RSS of the atomic run that made the ${fmt(LARGE, 0)}-step chain`,
          value: made[LARGE]!.peakRssMb,
          unit: "MB",
          baseline: { label: `the same of the ${fmt(SMALL, 0)}-step chain`, value: made[SMALL]!.peakRssMb, unit: "MB" },
          ratio: { value: runRss, meaning: `peak(${fmt(LARGE, 0)}) ÷ peak(${fmt(SMALL, 0)})` },
          target: { text: `ratio <= ${TARGET}`, ok: runRss <= TARGET },
          notes: [`wall time ${fmt(made[LARGE]!.ms / 1000, 1)} s vs ${fmt(made[SMALL]!.ms / 1000, 1)} s`],
        },
      ];
    } finally {
      for (const h of [...Object.values(homes), killedHome]) removeTempDir(h);
    }
  },
};

export default bench;
