/**
 * Resume cost: replaying a run with 10,000 recorded steps.
 *
 * Setup: bench/workflows/steps.ts with `gate: true` runs once in process
 * with durability "normal" (fast to record) and ends "failed" at its gate
 * with every step checkpointed. Replay = a resume whose every recorded step
 * returns its checkpoint: RootRun.resume + run() in process, journal at the
 * default synchronous=FULL; the gate stays closed, so each replay ends
 * "failed" again and the run stays resumable for the next sample.
 *
 * Targets:
 * - replay of 10,000 steps at most 3x the time of reading the same rows raw
 *   (bun:sqlite prepared statement, the query readEvents runs), alternating;
 * - O(n): replaying 40,000 steps costs at most 5x replaying 10,000;
 * - the peak RSS of a `dist/atomic resume` process replaying 10,000 steps
 *   stays under 250 MB (/usr/bin/time -v, or /proc polling).
 *
 * To show where a replay's time goes, the journal's calls are metered
 * (readEvents, write transactions) and the observer's replayed step_ended
 * events split it into phases; for information the same replay also runs
 * with synchronous=NORMAL, and the raw read is repeated with a JSON.parse
 * of every payload (decoding the events is work no replay can skip).
 */

import { Database } from "bun:sqlite";
import { join } from "node:path";
import {
  alternate,
  atomicBin,
  binaryEnv,
  expectStatus,
  fmt,
  loadBenchWorkflow,
  median,
  openCountedJournal,
  removeTempDir,
  resumeInProcess,
  runInProcess,
  runWithPeakRss,
  selfPeakRssMb,
  spread,
  tempDir,
  timed,
  type Bench,
  type Result,
} from "./lib.ts";

const SMALL = 10_000;
const LARGE = 40_000;
const REPS_SMALL = 11;
const REPS_LARGE = 7;
const RATIO_TARGET = 3;
const SCALE_TARGET = 5;
const RSS_TARGET_MB = 250;

const bench: Bench = {
  name: "resume",
  title: `replay of ${fmt(SMALL, 0)} recorded steps vs a raw read of the same rows; O(n); peak RSS of dist/atomic resume`,
  async run(): Promise<Result[]> {
    const home = tempDir();
    const gate = process.env.ATOMIC_BENCH_GATE;
    process.env.ATOMIC_BENCH_GATE = "closed";
    try {
      const wf = await loadBenchWorkflow("steps.ts");
      const ids: Record<number, string> = {};
      {
        const { journal } = await openCountedJournal(home, "normal");
        try {
          for (const n of [SMALL, LARGE]) {
            const run = await runInProcess(journal, home, wf, { steps: n, gate: true });
            expectStatus(run, "failed");
            ids[n] = run.runId;
          }
        } finally {
          await journal.close();
        }
      }

      const { journal, tx } = await openCountedJournal(home, "full");
      // A second handle on the same file with synchronous=NORMAL: the same replay without the fsyncs of its fixed records.
      const { journal: normalJournal } = await openCountedJournal(home, "normal");
      const raw = new Database(join(home, "atomic.db"), { readonly: true });
      // The query SqliteJournal.readEvents runs, as a prepared statement.
      const read = raw.prepare("select * from events where run_id = ? and seq > ? order by seq");
      const rows: Record<number, number> = {};
      try {
        // Where a FULL replay's time goes, per sample: the journal calls (metered) and the rest (the engine).
        type Parts = { readEvents: number[]; writes: number[]; writeTx: number; head: number[]; loop: number[]; tail: number[] };
        const noParts = (): Parts => ({ readEvents: [], writes: [], writeTx: 0, head: [], loop: [], tail: [] });
        const parts: Record<number, Parts> = { [SMALL]: noParts(), [LARGE]: noParts() };
        const replay = (n: number, durability: "full" | "normal" = "full") => async () => {
          tx.reset();
          const run = await resumeInProcess(durability === "full" ? journal : normalJournal, home, ids[n]!, wf);
          expectStatus(run, "failed");
          if (run.phases.replayed !== n) throw new Error(`replayed ${run.phases.replayed} steps, expected ${n}`);
          if (durability === "full") {
            const p = parts[n]!;
            p.readEvents.push(tx.readEventsMs);
            p.writes.push(tx.appendMs + tx.leaseMs);
            p.writeTx = tx.total();
            p.head.push(run.phases.firstReplayed);
            p.loop.push(run.phases.lastReplayed - run.phases.firstReplayed);
            p.tail.push(run.ms - run.phases.lastReplayed);
          }
          return run.ms;
        };
        // Informational: the raw read plus decoding each payload (JSON.parse), the least any replay must do.
        const rawDecoded = (n: number) => () =>
          timed(() => {
            for (const row of read.all(ids[n]!, 0) as { payload: string | null }[]) {
              if (row.payload !== null) JSON.parse(row.payload);
            }
          });
        const rawRead = (n: number) => () =>
          timed(() => {
            rows[n] = read.all(ids[n]!, 0).length;
          });
        // Warm-up: JIT and page cache for both sides.
        for (const n of [SMALL, LARGE]) {
          await rawRead(n)();
          await replay(n)();
        }
        parts[SMALL] = noParts();
        parts[LARGE] = noParts();
        const small = await alternate(REPS_SMALL, {
          raw: rawRead(SMALL),
          replay: replay(SMALL),
          rawDecoded: rawDecoded(SMALL),
          replayNormal: replay(SMALL, "normal"),
        });
        const large = await alternate(REPS_LARGE, { raw: rawRead(LARGE), replay: replay(LARGE) });
        const inProcessPeak = selfPeakRssMb();
        const breakdown = (n: number, replayMs: number, rawMs: number) => {
          const p = parts[n]!;
          const read = median(p.readEvents);
          const writes = median(p.writes);
          return (
            `where the time goes (medians): journal.readEvents ${fmt(read)} ms (raw rows ${fmt(rawMs)} + decoding); ` +
            `${p.writeTx} write transactions (lease acquire, run_resumed, status_changed, lease release) ${fmt(writes)} ms; ` +
            `engine and GC (replay cursor, ${fmt(n, 0)} replayed steps, the gate) ${fmt(replayMs - read - writes)} ms. ` +
            `Phases: to the first replayed step ${fmt(median(p.head))} ms, replaying the steps ${fmt(median(p.loop))} ms ` +
            `(${fmt((median(p.loop) / n) * 1000, 2)} µs per step), gate and run end ${fmt(median(p.tail))} ms`
          );
        };

        const replayMs = median(small.replay);
        const rawMs = median(small.raw);
        const ratio = replayMs / rawMs;
        const scale = median(large.replay) / replayMs;

        // The binary: peak RSS (and wall time) of a whole `atomic resume` process.
        const bin = atomicBin();
        const env = binaryEnv(home, { ATOMIC_BENCH_GATE: "closed" });
        const rss: Record<number, Awaited<ReturnType<typeof runWithPeakRss>>> = {};
        for (const n of [SMALL, LARGE]) {
          rss[n] = await runWithPeakRss([bin, "--quiet", "resume", ids[n]!], env);
          if (rss[n]!.code !== 1) {
            throw new Error(`dist/atomic resume (${n} steps) exited ${rss[n]!.code}, expected 1 (failed at the gate): ${rss[n]!.stderr.slice(-500)}`);
          }
        }
        const peak = rss[SMALL]!.peakRssMb;

        return [
          {
            bench: "resume",
            label: `replay of ${fmt(SMALL, 0)} recorded steps (RootRun.resume + run(), synchronous=FULL)`,
            value: replayMs,
            unit: "ms",
            baseline: { label: `raw read of the same ${fmt(rows[SMALL] ?? 0, 0)} rows (bun:sqlite prepared statement)`, value: rawMs, unit: "ms" },
            ratio: { value: ratio, meaning: "replay time ÷ raw read time" },
            target: { text: `ratio <= ${RATIO_TARGET}`, ok: ratio <= RATIO_TARGET },
            notes: [
              `replay: ${spread(small.replay)}; ${fmt(SMALL / (replayMs / 1000), 0)} replayed steps/s`,
              `raw read: ${spread(small.raw)}`,
              breakdown(SMALL, replayMs, rawMs),
              `informational: raw read + JSON.parse of every payload ${fmt(median(small.rawDecoded))} ms ` +
                `(replay ÷ that ${fmt(replayMs / median(small.rawDecoded), 2)}); the same replay with synchronous=NORMAL ` +
                `${fmt(median(small.replayNormal))} ms (÷ raw ${fmt(median(small.replayNormal) / rawMs, 2)})`,
            ],
          },
          {
            bench: "resume",
            label: `replay scaling, ${fmt(LARGE, 0)} vs ${fmt(SMALL, 0)} recorded steps`,
            value: median(large.replay),
            unit: "ms",
            baseline: { label: `replay of ${fmt(SMALL, 0)} steps`, value: replayMs, unit: "ms" },
            ratio: { value: scale, meaning: `replay(${fmt(LARGE, 0)}) ÷ replay(${fmt(SMALL, 0)}); 4.0 is linear` },
            target: { text: `ratio <= ${SCALE_TARGET}`, ok: scale <= SCALE_TARGET },
            notes: [
              `replay ${fmt(LARGE, 0)}: ${spread(large.replay)}; raw read of its ${fmt(rows[LARGE] ?? 0, 0)} rows ${spread(large.raw)} ` +
                `(replay ÷ raw ${fmt(median(large.replay) / median(large.raw), 2)})`,
              breakdown(LARGE, median(large.replay), median(large.raw)),
            ],
          },
          {
            bench: "resume",
            label: `peak RSS of \`dist/atomic resume\` replaying ${fmt(SMALL, 0)} steps`,
            value: peak,
            unit: "MB",
            target: { text: `< ${RSS_TARGET_MB} MB`, ok: peak < RSS_TARGET_MB },
            notes: [
              `measured with ${rss[SMALL]!.how}; process wall time ${fmt(rss[SMALL]!.ms)} ms`,
              `${fmt(LARGE, 0)} steps: peak RSS ${fmt(rss[LARGE]!.peakRssMb)} MB, wall time ${fmt(rss[LARGE]!.ms)} ms`,
              `this benchmark process (journals of both runs, all replays): peak RSS ${fmt(inProcessPeak)} MB`,
            ],
          },
        ];
      } finally {
        raw.close();
        await normalJournal.close();
        await journal.close();
      }
    } finally {
      if (gate === undefined) delete process.env.ATOMIC_BENCH_GATE;
      else process.env.ATOMIC_BENCH_GATE = gate;
      removeTempDir(home);
    }
  },
};

export default bench;
