/**
 * Runs the benchmarks: `npm run bench` (all) or `bun bench/run.ts NAME...`.
 *
 * Each benchmark runs in a process of its own (this file, re-run with
 * `--child NAME`), so one benchmark's heap, JIT state and open files do not
 * colour the next one's figures. Every figure is printed with its baseline
 * (measured in the same run), the ratio, the target and PASS/FAIL; the
 * summary at the end lists them all. Exit code 1 if any target fails or a
 * benchmark breaks.
 */

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { BUN, ROOT, atomicBin, fmt, killSpawned, killSpawnedNow, printResult, removeTempDirs, verdict, type Bench, type Result } from "./lib.ts";

/** Each benchmark; `timeoutMs` where it needs longer than BENCH_TIMEOUT_MS. */
const BENCHES: Record<string, { load: () => Promise<Bench>; usesBinary: boolean; timeoutMs?: number }> = {
  startup: { load: () => import("./startup.ts").then((m) => m.default), usesBinary: true },
  check: { load: () => import("./check.ts").then((m) => m.default), usesBinary: true },
  sequential: { load: () => import("./sequential.ts").then((m) => m.default), usesBinary: false },
  tracing: { load: () => import("./tracing.ts").then((m) => m.default), usesBinary: true },
  // Builds a second binary (tracing bypassed) first: about half a minute.
  "tracing-off": { load: () => import("./tracing-off.ts").then((m) => m.default), usesBinary: true, timeoutMs: 300_000 },
  fanout: { load: () => import("./fanout.ts").then((m) => m.default), usesBinary: false },
  children: { load: () => import("./children.ts").then((m) => m.default), usesBinary: false },
  resume: { load: () => import("./resume.ts").then((m) => m.default), usesBinary: true },
  recovery: { load: () => import("./recovery.ts").then((m) => m.default), usesBinary: true },
  pool: { load: () => import("./pool.ts").then((m) => m.default), usesBinary: true },
  output: { load: () => import("./output.ts").then((m) => m.default), usesBinary: true },
  intercom: { load: () => import("./intercom.ts").then((m) => m.default), usesBinary: false },
  "attach-latency": { load: () => import("./attach-latency.ts").then((m) => m.default), usesBinary: true },
  status: { load: () => import("./status.ts").then((m) => m.default), usesBinary: true },
  tui: { load: () => import("./tui.ts").then((m) => m.default), usesBinary: true },
  "status-scale": { load: () => import("./status-scale.ts").then((m) => m.default), usesBinary: false },
  // Seeds 101,000 runs (about a minute) before it measures.
  "status-100k": { load: () => import("./status-100k.ts").then((m) => m.default), usesBinary: false, timeoutMs: 420_000 },
  agents: { load: () => import("./agents.ts").then((m) => m.default), usesBinary: true },
  "agent-stages": { load: () => import("./agent-stages.ts").then((m) => m.default), usesBinary: true },
  // Every process kind left waiting for 60 s, measured from /proc.
  idle: { load: () => import("./idle.ts").then((m) => m.default), usesBinary: true, timeoutMs: 180_000 },
  "agent-loop": { load: () => import("./agent-loop.ts").then((m) => m.default), usesBinary: true },
  // 10,000 stages of `sleep 0.05` on 4 workers: two minutes of sleeping at the least.
  "shell-fanout": { load: () => import("./shell-fanout.ts").then((m) => m.default), usesBinary: true, timeoutMs: 600_000 },
  // Two chains of a continue-as-new loop (20,000 and 200,000 steps), ten resumes, and the 200,000 again killed three times.
  "continue-as-new": { load: () => import("./continue-as-new.ts").then((m) => m.default), usesBinary: true, timeoutMs: 1_200_000 },
  testrun: { load: () => import("./testrun.ts").then((m) => m.default), usesBinary: true },
  toolrun: { load: () => import("./toolrun.ts").then((m) => m.default), usesBinary: true },
  logs: { load: () => import("./logs.ts").then((m) => m.default), usesBinary: true },
  "rate-limits": { load: () => import("./rate-limits.ts").then((m) => m.default), usesBinary: true },
  sandbox: { load: () => import("./sandbox.ts").then((m) => m.default), usesBinary: true },
  worktree: { load: () => import("./worktree.ts").then((m) => m.default), usesBinary: false },
  service: { load: () => import("./service.ts").then((m) => m.default), usesBinary: true },
  // 1,000 sequential steps quiet and beside two CPU hogs, 5 pairs, on SQLite and on Postgres.
  contention: { load: () => import("./contention.ts").then((m) => m.default), usesBinary: true, timeoutMs: 400_000 },
  postgres: { load: () => import("./postgres.ts").then((m) => m.default), usesBinary: false },
  "postgres-recovery": { load: () => import("./postgres-recovery.ts").then((m) => m.default), usesBinary: true },
  // Two outages of a local Postgres: one waits out the 15 s retry window.
  "postgres-outage": { load: () => import("./postgres-outage.ts").then((m) => m.default), usesBinary: true },
  "pg-claims": { load: () => import("./pg-claims.ts").then((m) => m.default), usesBinary: false },
  artifacts: { load: () => import("./artifacts.ts").then((m) => m.default), usesBinary: false },
  // Six runs of 600 stages of `sleep 0.2` (30, 15 and 10 s of sleeping each, twice) and hosts started in between.
  "fleet-scale": { load: () => import("./fleet-scale.ts").then((m) => m.default), usesBinary: true, timeoutMs: 420_000 },
  "fleet-dispatch": { load: () => import("./fleet-dispatch.ts").then((m) => m.default), usesBinary: true },
  "fleet-recovery": { load: () => import("./fleet-recovery.ts").then((m) => m.default), usesBinary: true },
};

/** Longest a single benchmark may take before it is killed and counted as failed. */
const BENCH_TIMEOUT_MS = 180_000;

async function child(name: string, out: string): Promise<number> {
  const entry = BENCHES[name];
  if (!entry) throw new Error(`unknown benchmark ${name}`);
  const bench = await entry.load();
  // Stopped (the parent was interrupted, or its reader went away): nothing of this benchmark stays
  // behind. All at once, before the benchmark's own code can start anything more.
  const stop = () => {
    killSpawnedNow();
    removeTempDirs();
    process.exit(130);
  };
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(sig, stop);
  let results: Result[] = [];
  try {
    results = await bench.run();
  } finally {
    await killSpawned();
    removeTempDirs();
  }
  for (const r of results) printResult(r);
  writeFileSync(out, JSON.stringify(results));
  return 0;
}

async function parent(names: string[]): Promise<number> {
  const unknown = names.filter((n) => !BENCHES[n]);
  if (unknown.length > 0) {
    process.stderr.write(`unknown benchmark(s): ${unknown.join(", ")}; known: ${Object.keys(BENCHES).join(", ")}\n`);
    return 2;
  }
  const selected = names.length > 0 ? names : Object.keys(BENCHES);
  // Build the binary once, here, rather than racing to build it in several children.
  if (selected.some((n) => BENCHES[n]!.usesBinary)) atomicBin();

  const dir = mkdtempSync(join(tmpdir(), "atomic-bench-results-"));
  let current: Subprocess | undefined;
  const onSignal = () => {
    // SIGTERM first: the child removes its temp dirs and its processes; SIGKILL if it does not go.
    const child = current;
    child?.kill("SIGTERM");
    const force = setTimeout(() => child?.kill("SIGKILL"), 5_000);
    void (child?.exited ?? Promise.resolve()).finally(() => {
      clearTimeout(force);
      rmSync(dir, { recursive: true, force: true });
      process.exit(130);
    });
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  process.on("SIGHUP", onSignal);
  // A reader that went away (`npm run bench | head`) stops the run the same way.
  process.stdout.on("error", onSignal);

  const all: Result[] = [];
  const broken: string[] = [];
  const t0 = performance.now();
  try {
    for (const name of selected) {
      const bench = await BENCHES[name]!.load();
      process.stdout.write(`\n== ${name}: ${bench.title}\n`);
      const out = join(dir, `${name}.json`);
      const started = performance.now();
      current = Bun.spawn([BUN, join(ROOT, "bench", "run.ts"), "--child", name, out], {
        cwd: ROOT,
        stdin: "ignore",
        stdout: "inherit",
        stderr: "inherit",
      });
      // Over time: SIGTERM first (the child kills what it started and removes its temp dirs), SIGKILL if it stays.
      const proc = current;
      let force: ReturnType<typeof setTimeout> | undefined;
      const timer = setTimeout(() => {
        proc.kill("SIGTERM");
        force = setTimeout(() => proc.kill("SIGKILL"), 5_000);
      }, BENCHES[name]!.timeoutMs ?? BENCH_TIMEOUT_MS);
      const code = await current.exited;
      clearTimeout(timer);
      clearTimeout(force);
      current = undefined;
      let results: Result[] | undefined;
      try {
        results = JSON.parse(readFileSync(out, "utf8")) as Result[];
      } catch {
        results = undefined;
      }
      if (code !== 0 || !results) {
        broken.push(name);
        process.stdout.write(`  [FAIL] ${name} did not finish (exit ${code})\n`);
      } else {
        all.push(...results);
      }
      process.stdout.write(`  (${name} took ${fmt((performance.now() - started) / 1000, 1)} s)\n`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }

  process.stdout.write(`\n== summary (${fmt((performance.now() - t0) / 1000, 1)} s)\n`);
  for (const r of all) {
    const ratio = r.ratio ? `ratio ${fmt(r.ratio.value, 3)}` : "";
    const target = r.target ? `target ${r.target.text.split(" (")[0]}` : "";
    process.stdout.write(`  ${verdict(r).padEnd(4)}  ${r.bench.padEnd(10)}  ${fmt(r.value)} ${r.unit}  ${[ratio, target].filter(Boolean).join(", ")}\n`);
  }
  for (const name of broken) process.stdout.write(`  FAIL  ${name.padEnd(10)}  did not finish\n`);
  const failed = all.filter((r) => verdict(r) === "FAIL").length + broken.length;
  process.stdout.write(failed === 0 ? "all targets met\n" : `${failed} target(s) failed\n`);
  return failed === 0 ? 0 : 1;
}

const args = process.argv.slice(2);
let code: number;
try {
  code = args[0] === "--child" ? await child(args[1]!, args[2]!) : await parent(args);
} catch (err) {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  code = 1;
}
process.exit(code);
