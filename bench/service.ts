/**
 * The local service (`atomic serve`, src/service/), with default settings.
 *
 * Recovery latency: a run of paced steps (bench/workflows/paced.ts) is
 * driven by `dist/atomic run`; after its third step the driver is
 * SIGKILLed while the service runs. Measured: from the SIGKILL to the
 * first new step the service's drive records (a checkpoint after its
 * run_resumed event), read from the journal every 5 ms. It covers noticing
 * the dead driver (the service scans every 500 ms), starting `atomic
 * resume` in a process of its own, the replay, and the step. Baseline,
 * alternating in the same run: the startup of `dist/atomic --help`.
 * Target (issue 17): at most 2 s.
 *
 * Idle: 1,000 finished runs seeded into the journal (test/helpers/seed-runs.ts),
 * the service started and left alone; measured over IDLE_S seconds after a
 * settling time: its CPU (utime + stime from /proc, as a share of one core)
 * and its resident set (VmRSS; the peak VmHWM in the notes). Baseline in
 * the same run: `atomic serve --no-recover` (the status server alone) on
 * the same journal. Targets: at most 1% of one core and 60 MB. Ten
 * schedules are added first when the binary has `atomic schedule`.
 */

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { openJournal } from "../src/journal/open.ts";
import type { Journal } from "../src/journal/journal.ts";
import type { RunId } from "../src/shared/ids.ts";
import { seedRun } from "../test/helpers/seed-runs.ts";
import { streamLines } from "../test/helpers/lines.ts";
import { atomicBin, binaryEnv, fmt, median, removeTempDir, runTimed, settle, spawnTracked, spread, tempDir, WORKFLOWS, type Bench, type Result } from "./lib.ts";

const REPS = 5;
const TARGET_MS = 2_000;
const SEEDED = 1_000;
const IDLE_S = 10;
const SETTLE_MS = 3_000;
const SCHEDULES = 10;

type Proc = ReturnType<typeof spawnTracked>;

/**
 * Reads `proc`'s NDJSON stdout to its end (a process whose reader goes away stops: the service and a
 * driver both do), resolving `first(match)` with the first line `match` accepts; `match` runs as the
 * line is read, so it can act at that moment.
 */
function follow(proc: Proc) {
  const seen: Record<string, unknown>[] = [];
  const waiters: { match: (e: Record<string, unknown>) => boolean; resolve: (e: Record<string, unknown>) => void }[] = [];
  void (async () => {
    for await (const batch of streamLines(proc.stdout as ReadableStream<Uint8Array>)) {
      for (const line of batch) {
        if (!line.startsWith("{")) continue;
        const e = JSON.parse(line) as Record<string, unknown>;
        seen.push(e);
        for (const w of [...waiters]) if (w.match(e)) waiters.splice(waiters.indexOf(w), 1), w.resolve(e);
      }
    }
  })();
  return {
    first(match: (e: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
      const hit = seen.find(match);
      return hit ? Promise.resolve(hit) : new Promise((resolve) => waiters.push({ match, resolve }));
    },
  };
}

function startService(bin: string, home: string, extra: string[] = []): Proc {
  return spawnTracked([bin, "--json", "serve", "--port", "0", ...extra], { env: binaryEnv(home), stdout: "pipe", stderr: "ignore" });
}

async function stopService(proc: Proc): Promise<void> {
  proc.kill("SIGTERM");
  const timer = setTimeout(() => proc.kill("SIGKILL"), 30_000);
  await proc.exited;
  clearTimeout(timer);
}

/** SIGKILL of a driver after its third step, to the service's first new step of that run (ms). */
async function recoveryOnce(bin: string, home: string, journal: Journal): Promise<number> {
  const run = spawnTracked([bin, "--json", "run", join(WORKFLOWS, "paced.ts"), "--input", "steps=40"], { env: binaryEnv(home), stdout: "pipe" });
  let ended = 0;
  let t0 = 0;
  // Killed while its stdout is still read: a driver whose reader went away would stop itself (interrupted), not crash.
  const started = await follow(run).first((e) => {
    if (e.type !== "step_ended" || ++ended < 3) return false;
    run.kill("SIGKILL");
    t0 = performance.now();
    return true;
  });
  const runId = started.runId as RunId;
  await run.exited;
  const before = (await journal.getRun(runId))!.lastSeq;
  for (;;) {
    const events = await journal.readEvents(runId, before);
    const resumed = events.findIndex((e) => e.type === "run_resumed" && (e.payload as { drivenBy?: string }).drivenBy === "service");
    if (resumed >= 0 && events.slice(resumed + 1).some((e) => e.type === "checkpoint")) return performance.now() - t0;
    if (performance.now() - t0 > 60_000) throw new Error(`the service did not resume run ${runId} within 60 s`);
    await Bun.sleep(5);
  }
}

function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(f[11]) + Number(f[12]); // utime, stime
}

function statusKb(pid: number, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : NaN;
}

/** The service idle for IDLE_S seconds: CPU as % of one core, RSS and peak RSS in MB. */
async function idle(bin: string, home: string, extra: string[]): Promise<{ cpuPct: number; rssMb: number; peakMb: number }> {
  const proc = startService(bin, home, extra);
  try {
    await follow(proc).first((e) => e.type === "serving");
    await Bun.sleep(SETTLE_MS);
    const hz = 100; // USER_HZ on Linux
    const t0 = performance.now();
    const c0 = cpuTicks(proc.pid);
    await Bun.sleep(IDLE_S * 1000);
    const cpuPct = (((cpuTicks(proc.pid) - c0) / hz) * 1000 * 100) / (performance.now() - t0);
    return { cpuPct, rssMb: statusKb(proc.pid, "VmRSS") / 1024, peakMb: statusKb(proc.pid, "VmHWM") / 1024 };
  } finally {
    await stopService(proc);
  }
}

/**
 * SCHEDULES schedules (weekdays at 09:00 UTC: none ticks during the measurement), through `atomic
 * schedule add`, when this build has schedules; none otherwise (the note says which).
 */
async function seedSchedules(bin: string, home: string): Promise<{ count: number; note: string }> {
  for (let i = 0; i < SCHEDULES; i++) {
    const r = await runTimed([bin, "schedule", "add", `bench-${i}`, "--cron", "0 9 * * 1-5", join(WORKFLOWS, "paced.ts"), "--input", "steps=1"], { env: binaryEnv(home), capture: true });
    if (r.code !== 0) {
      if (i === 0 && /unknown command/.test(r.stderr)) return { count: 0, note: "no schedules seeded: this build has no atomic schedule command" };
      throw new Error(`atomic schedule add failed (exit ${r.code}): ${r.stderr.slice(-300)}`);
    }
  }
  return { count: SCHEDULES, note: `${SCHEDULES} schedules seeded (cron 0 9 * * 1-5, none due while measured)` };
}

const bench: Bench = {
  name: "service",
  title: "the local service: SIGKILL of a driver to the service's first new step; idle CPU and memory with 1,000 finished runs",
  async run(): Promise<Result[]> {
    const bin = atomicBin();
    const results: Result[] = [];
    const home = tempDir();
    try {
      const journal = await openJournal({ home, durability: "full" });
      const service = startService(bin, home);
      try {
        await follow(service).first((e) => e.type === "service_active");
        await runTimed([bin, "--help"]);
        await recoveryOnce(bin, home, journal); // warm-up: page cache, the service's first scan
        const help: number[] = [];
        const latency: number[] = [];
        for (let i = 0; i < REPS; i++) {
          settle();
          help.push((await runTimed([bin, "--help"], { env: binaryEnv(home) })).ms);
          settle();
          latency.push(await recoveryOnce(bin, home, journal));
        }
        const ms = median(latency);
        const helpMs = median(help);
        results.push({
          bench: "service",
          label: "recovery latency: SIGKILL of a driver to the service's first new step of that run (default settings)",
          value: ms,
          unit: "ms",
          baseline: { label: "startup of dist/atomic --help", value: helpMs, unit: "ms" },
          ratio: { value: ms / TARGET_MS, meaning: `latency ÷ the ${TARGET_MS} ms target (÷ --help startup: ${fmt(ms / helpMs)})` },
          target: { text: `<= ${TARGET_MS} ms`, ok: ms <= TARGET_MS },
          notes: [`latency: ${spread(latency)}`, `--help: ${spread(help)}`, "includes up to one 500 ms scan interval of the service"],
        });
      } finally {
        await stopService(service);
        await journal.close();
      }
    } finally {
      removeTempDir(home);
    }

    const seeded = tempDir();
    try {
      const journal = await openJournal({ home: seeded, durability: "normal" });
      for (let i = 0; i < SEEDED; i++) await seedRun(journal, { stages: 2, at: Date.now() - (SEEDED - i) * 60_000 });
      await journal.close();
      const schedules = await seedSchedules(bin, seeded);
      const base = await idle(bin, seeded, ["--no-recover"]);
      const svc = await idle(bin, seeded, []);
      results.push(
        {
          bench: "service",
          label: `service idle CPU with ${fmt(SEEDED, 0)} finished runs${schedules.count ? ` and ${schedules.count} schedules` : ""} (% of one core, over ${IDLE_S} s)`,
          value: svc.cpuPct,
          unit: "%",
          baseline: { label: "atomic serve --no-recover (status server alone)", value: base.cpuPct, unit: "%" },
          ratio: { value: svc.cpuPct / 1, meaning: "CPU ÷ the 1% target" },
          target: { text: "<= 1% of one core", ok: svc.cpuPct <= 1 },
          notes: [schedules.note],
        },
        {
          bench: "service",
          label: `service idle RSS with ${fmt(SEEDED, 0)} finished runs${schedules.count ? ` and ${schedules.count} schedules` : ""}`,
          value: svc.rssMb,
          unit: "MB",
          baseline: { label: "atomic serve --no-recover (status server alone)", value: base.rssMb, unit: "MB" },
          ratio: { value: svc.rssMb / 60, meaning: "RSS ÷ the 60 MB target" },
          target: { text: "<= 60 MB", ok: svc.rssMb <= 60 },
          notes: [`peak RSS (VmHWM): service ${fmt(svc.peakMb)} MB, --no-recover ${fmt(base.peakMb)} MB`, schedules.note],
        },
      );
    } finally {
      removeTempDir(seeded);
    }
    return results;
  },
};

export default bench;
