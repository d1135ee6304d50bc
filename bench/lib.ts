/**
 * Shared helpers of the benchmarks (`npm run bench`, see bench/run.ts).
 *
 * Rules every benchmark follows (docs/design/conventions.md):
 * - A figure is always reported with a ratio against a baseline measured
 *   in the same run, on the same machine, right next to it (raw bun:sqlite
 *   commits, a raw prepared-statement read, `bun -e 0`), so a loaded or
 *   slow machine moves both sides and the ratio stays meaningful.
 * - Baseline and subject alternate (a, b, a, b, ...) with a full GC before
 *   each sample, and medians are compared.
 * - Every temp directory is removed and every spawned process is killed,
 *   even when a benchmark throws.
 */

import { Database } from "bun:sqlite";
import type { Subprocess } from "bun";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RootRun } from "../src/engine/driver.ts";
import { validateInputs } from "../src/engine/inputs.ts";
import { loadWorkflowFile, type LoadedWorkflow } from "../src/engine/loader.ts";
import type { EngineObserver } from "../src/engine/observer.ts";
import type { RunOutcome } from "../src/engine/step-run.ts";
import { SqliteJournal } from "../src/journal/sqlite/sqlite-journal.ts";
import type { Durability, Journal } from "../src/journal/journal.ts";
import { ROOT, atomicBin as buildAtomicBin } from "../scripts/binary.ts";
import { streamLines } from "../test/helpers/lines.ts";

export { ROOT };
export const BUN = join(ROOT, "node_modules", ".bin", "bun");
export const WORKFLOWS = join(ROOT, "bench", "workflows");

// ---------------------------------------------------------------- results

export type Verdict = "PASS" | "FAIL" | "info";

/** One reported figure: value, baseline, ratio, target and verdict. */
export interface Result {
  bench: string;
  /** What was measured, e.g. "sequential steps/s (FULL)". */
  label: string;
  value: number;
  unit: string;
  baseline?: { label: string; value: number; unit: string };
  /** The compared quantity (usually value vs baseline) and how it was formed. */
  ratio?: { value: number; meaning: string };
  /** e.g. { text: "ratio >= 0.6", ok: true }; absent for informational figures. */
  target?: { text: string; ok: boolean };
  notes?: string[];
}

export function verdict(r: Result): Verdict {
  if (!r.target) return "info";
  return r.target.ok ? "PASS" : "FAIL";
}

export function fmt(n: number, digits?: number): string {
  if (!Number.isFinite(n)) return String(n);
  const d = digits ?? (Math.abs(n) >= 100 ? 0 : Math.abs(n) >= 10 ? 1 : 2);
  return n.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
}

export function printResult(r: Result): void {
  const v = verdict(r);
  const lines = [`  [${v}] ${r.label}: ${fmt(r.value)} ${r.unit}`];
  if (r.baseline) lines.push(`         baseline ${r.baseline.label}: ${fmt(r.baseline.value)} ${r.baseline.unit}`);
  if (r.ratio) lines.push(`         ratio ${fmt(r.ratio.value, 3)} (${r.ratio.meaning})`);
  if (r.target) lines.push(`         target ${r.target.text}`);
  for (const n of r.notes ?? []) lines.push(`         ${n}`);
  process.stdout.write(`${lines.join("\n")}\n`);
}

export interface Bench {
  name: string;
  /** One line: what the benchmark does. */
  title: string;
  run(): Promise<Result[]>;
}

// ---------------------------------------------------------------- statistics

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** "median 12.3 ms (min 11.0, max 15.2, n=7)". */
export function spread(xs: readonly number[], unit = "ms"): string {
  return `median ${fmt(median(xs))} ${unit} (min ${fmt(Math.min(...xs))}, max ${fmt(Math.max(...xs))}, n=${xs.length})`;
}

/** Full collection, so garbage left by the previous sample is not charged to the next. */
export function settle(): void {
  Bun.gc(true);
}

/**
 * Runs the named subjects in alternation (a, b, a, b, ...) `reps` times,
 * with a full GC before each; each subject returns its own duration in ms
 * (so it can leave setup out of the timing). Returns the samples per name.
 */
export async function alternate<K extends string>(
  reps: number,
  subjects: Record<K, () => Promise<number> | number>,
): Promise<Record<K, number[]>> {
  const out = {} as Record<K, number[]>;
  for (const k of Object.keys(subjects) as K[]) out[k] = [];
  for (let i = 0; i < reps; i++) {
    for (const k of Object.keys(subjects) as K[]) {
      settle();
      out[k].push(await subjects[k]());
    }
  }
  return out;
}

/** Times a callback in ms. */
export async function timed(fn: () => unknown): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

// ---------------------------------------------------------------- temp dirs

const tempDirs = new Set<string>();

/**
 * Memory-backed storage when the machine has /dev/shm, else undefined (the
 * temp dir). On the shared build VMs creating a directory or a file on the
 * disk costs anywhere from 0.05 to 1.3 ms of CPU depending on what else
 * runs: benches whose subject writes files put them here, so that they
 * measure the subject, not the disk (and report the disk for information).
 */
export const TMPFS = existsSync("/dev/shm") ? "/dev/shm" : undefined;

/** A fresh directory under `base` (the temp dir by default), removed by removeTempDirs() whatever happens. */
export function tempDir(prefix = "atomic-bench-", base = tmpdir()): string {
  const dir = mkdtempSync(join(base, prefix));
  tempDirs.add(dir);
  return dir;
}

export function removeTempDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  tempDirs.delete(dir);
}

export function removeTempDirs(): void {
  for (const dir of [...tempDirs]) removeTempDir(dir);
}

// ---------------------------------------------------------------- raw SQLite baselines

/** The events table's shape (migrations.ts): what a raw single-row commit writes. */
const RAW_SCHEMA = `create table if not exists events (
  run_id text not null, seq integer not null, type text not null, key text,
  idempotency_key text, payload text, at integer not null,
  primary key (run_id, seq)) strict, without rowid`;

/** About the size of a no-op tool step's checkpoint payload. */
const RAW_PAYLOAD = JSON.stringify({ kind: "tool", name: "noop", args: "1b3k9x2m4q7zp", result: {}, startedAt: Date.now() });

/**
 * A raw bun:sqlite database configured like the journal (WAL, the given
 * synchronous level), holding an events-shaped table: the baseline for
 * "one commit per step".
 */
export class RawCommits {
  readonly db: Database;
  #seq = 0;
  readonly #begin;
  readonly #commit;
  readonly #insert;

  constructor(path: string, durability: Durability) {
    this.db = new Database(path, { create: true, readwrite: true });
    this.db.run("pragma busy_timeout = 10000");
    this.db.run("pragma journal_mode = wal");
    this.db.run(`pragma synchronous = ${durability}`);
    this.db.run(RAW_SCHEMA);
    this.#begin = this.db.prepare("begin immediate");
    this.#commit = this.db.prepare("commit");
    this.#insert = this.db.prepare(
      "insert into events (run_id, seq, type, key, idempotency_key, payload, at) values (?, ?, ?, ?, ?, ?, ?)",
    );
  }

  /** `n` single-row transactions (BEGIN IMMEDIATE, INSERT, COMMIT); returns ms. */
  commitRows(n: number): number {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) {
      const seq = ++this.#seq;
      this.#begin.run();
      this.#insert.run("raw-run", seq, "checkpoint", String(seq), null, RAW_PAYLOAD, Date.now());
      this.#commit.run();
    }
    return performance.now() - t0;
  }

  close(): void {
    this.db.close();
  }
}

// ---------------------------------------------------------------- the engine, in process

/**
 * Journal calls counted and timed by wrapping the journal's methods: write
 * transactions (appends and lease operations) and event reads. Times are
 * wall time inside the call, in ms.
 */
export interface JournalMeter {
  /** append calls: one transaction each (a group-commit batch). */
  append: number;
  /** Entries over all append calls. */
  entries: number;
  /** acquireLease / renewLease / releaseLease calls: one transaction each. */
  lease: number;
  readEvents: number;
  appendMs: number;
  leaseMs: number;
  readEventsMs: number;
  reset(): void;
  /** Write transactions (append + lease). */
  total(): number;
}

/** Opens the SQLite journal `atomic.db` in `home` (as the CLI does), metering its calls. */
export async function openCountedJournal(home: string, durability: Durability): Promise<{ journal: Journal; tx: JournalMeter }> {
  const journal = await SqliteJournal.open(join(home, "atomic.db"), { durability });
  return { journal, tx: meterJournal(journal) };
}

/** Meters an open journal's calls (its methods wrapped in place). */
export function meterJournal(journal: Journal): JournalMeter {
  const tx: JournalMeter = {
    append: 0,
    entries: 0,
    lease: 0,
    readEvents: 0,
    appendMs: 0,
    leaseMs: 0,
    readEventsMs: 0,
    reset() {
      this.append = this.entries = this.lease = this.readEvents = 0;
      this.appendMs = this.leaseMs = this.readEventsMs = 0;
    },
    total() {
      return this.append + this.lease;
    },
  };
  const j = journal as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const meter = (name: string, count: (args: unknown[]) => void, add: (ms: number) => void) => {
    const inner = j[name]!.bind(journal);
    j[name] = async (...args) => {
      count(args);
      const t0 = performance.now();
      try {
        return await inner(...args);
      } finally {
        add(performance.now() - t0);
      }
    };
  };
  meter(
    "append",
    (args) => {
      tx.append++;
      tx.entries += (args[1] as unknown[]).length;
    },
    (ms) => (tx.appendMs += ms),
  );
  for (const name of ["acquireLease", "renewLease", "releaseLease"]) {
    meter(name, () => tx.lease++, (ms) => (tx.leaseMs += ms));
  }
  meter("readEvents", () => tx.readEvents++, (ms) => (tx.readEventsMs += ms));
  return tx;
}

export async function loadBenchWorkflow(file: string): Promise<LoadedWorkflow> {
  return loadWorkflowFile(join(WORKFLOWS, file));
}

export interface EngineRun {
  runId: string;
  outcome: RunOutcome;
  /** From RootRun.start to the end of run(): the whole run, lease and all. */
  ms: number;
}

/** Starts and drives a root run in this process (what `atomic run` does, minus the CLI). */
export async function runInProcess(
  journal: Journal,
  home: string,
  wf: LoadedWorkflow,
  rawInputs: Record<string, unknown>,
  /** Pin the run to its code as `atomic run` does (default); false: the run records none (bench/sequential.ts compares). */
  pin = true,
): Promise<EngineRun> {
  const inputs = validateInputs(wf.definition.inputs ?? {}, rawInputs, wf.path);
  const t0 = performance.now();
  const root = await RootRun.start(
    { journal, home, observer: () => {} },
    { definition: wf.definition, workflowPath: wf.path, digest: wf.digest, ...(pin && wf.code ? { code: wf.code } : {}), inputs },
  );
  const outcome = await root.run();
  return { runId: root.runId, outcome, ms: performance.now() - t0 };
}

/** Phases of a resume, from the observer's step_ended events (ms since RootRun.resume was called). */
export interface ResumePhases {
  /** First replayed step ended: lease taken, events read, replay cursor built, run_resumed recorded. */
  firstReplayed: number;
  /** Last replayed step ended. */
  lastReplayed: number;
  replayed: number;
}

/**
 * Resumes a recorded root run in this process; returns the time of
 * RootRun.resume + run() and, from the observer, when replayed steps ended.
 */
export async function resumeInProcess(
  journal: Journal,
  home: string,
  runId: string,
  wf: LoadedWorkflow,
): Promise<EngineRun & { phases: ResumePhases }> {
  const run = await journal.getRun(runId as never);
  if (!run) throw new Error(`run ${runId} not found`);
  const phases: ResumePhases = { firstReplayed: NaN, lastReplayed: NaN, replayed: 0 };
  let t0 = 0;
  const observer: EngineObserver = (e) => {
    if (e.type === "step_ended" && e.replayed) {
      const t = performance.now() - t0;
      if (phases.replayed++ === 0) phases.firstReplayed = t;
      phases.lastReplayed = t;
    }
  };
  t0 = performance.now();
  const root = await RootRun.resume({ journal, home, observer }, run, wf.definition, wf.digest);
  const outcome = await root.run();
  return { runId, outcome, ms: performance.now() - t0, phases };
}

export function expectStatus(run: EngineRun, status: string): void {
  if (run.outcome.status !== status) {
    throw new Error(`run ${run.runId} ended ${run.outcome.status}, expected ${status}: ${run.outcome.error?.message ?? ""}`);
  }
}

// ---------------------------------------------------------------- the binary

/** dist/atomic, built first when missing or older than the sources (ATOMIC_BIN overrides). */
export function atomicBin(): string {
  return buildAtomicBin(() => process.stdout.write("  (building dist/atomic: it is missing or older than src/)\n"));
}

/** The environment a benchmark gives the binary: its own home, no colours, no NODE_ENV from bun. */
export function binaryEnv(home: string, extra: Record<string, string | undefined> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...process.env, NO_COLOR: "1", ATOMIC_HOME: home, ...extra })) {
    if (v !== undefined) env[k] = v;
  }
  delete env.NODE_ENV;
  delete env.ATOMIC_FAULT_POINTS;
  if (extra.ATOMIC_FAULT_POINTS) env.ATOMIC_FAULT_POINTS = extra.ATOMIC_FAULT_POINTS;
  return env;
}

const spawned = new Set<Subprocess>();
/** The spawned processes that lead a process group of their own (`detached`): killed with their group. */
const groupLeaders = new WeakSet<Subprocess>();

/** Bun.spawn, remembering the process so `killSpawned` can end it. */
export function spawnTracked(
  cmd: string[],
  opts: {
    env?: Record<string, string>;
    stdout?: "pipe" | "ignore" | "inherit";
    stderr?: "pipe" | "ignore" | "inherit";
    cwd?: string;
    /** In a process group (and session) of its own. */
    detached?: boolean;
  },
): Subprocess {
  const proc = Bun.spawn(cmd, {
    cwd: opts.cwd ?? ROOT,
    ...(opts.detached ? { detached: true } : {}),
    env: opts.env ?? (process.env as Record<string, string>),
    stdin: "ignore",
    stdout: opts.stdout ?? "ignore",
    stderr: opts.stderr ?? "ignore",
  });
  spawned.add(proc);
  if (opts.detached) groupLeaders.add(proc);
  void proc.exited.then(() => spawned.delete(proc));
  return proc;
}

/** SIGKILLs every process a benchmark started that is still running; returns them. */
export function killSpawnedNow(): Subprocess[] {
  const live = [...spawned];
  for (const p of live) {
    try {
      if (groupLeaders.has(p)) process.kill(-p.pid, "SIGKILL");
    } catch {
      // the group is gone
    }
    p.kill("SIGKILL");
  }
  spawned.clear();
  return live;
}

/** killSpawnedNow, then waits for them. */
export async function killSpawned(): Promise<void> {
  await Promise.all(killSpawnedNow().map((p) => p.exited));
}

/** Runs a command to its end; returns its wall time (spawn to exit) and output. */
export async function runTimed(
  cmd: string[],
  opts: { env?: Record<string, string>; capture?: boolean; timeoutMs?: number } = {},
): Promise<{ ms: number; code: number | null; signal: string | null; stdout: string; stderr: string }> {
  const t0 = performance.now();
  const proc = spawnTracked(cmd, {
    ...(opts.env ? { env: opts.env } : {}),
    stdout: opts.capture ? "pipe" : "ignore",
    stderr: opts.capture ? "pipe" : "ignore",
  });
  const timer = setTimeout(() => proc.kill("SIGKILL"), opts.timeoutMs ?? 120_000);
  const [stdout, stderr] = opts.capture
    ? await Promise.all([
        new Response(proc.stdout as ReadableStream).text(),
        new Response(proc.stderr as ReadableStream).text(),
      ])
    : ["", ""];
  await proc.exited;
  const ms = performance.now() - t0;
  clearTimeout(timer);
  return { ms, code: proc.exitCode, signal: proc.signalCode === null ? null : String(proc.signalCode), stdout, stderr };
}

/**
 * The benchmarks' fake OpenAI-compatible provider (bench/fake-openai-server.ts)
 * in a process of its own, so its work is not charged to the benchmark's
 * process; `env` sets its script's knobs (FAKE_TURNS, FAKE_LATENCY_TURNS).
 */
export async function startFakeProvider(env: Record<string, string> = {}): Promise<{ url: string; stop(): void }> {
  const proc = spawnTracked([BUN, join(ROOT, "bench", "fake-openai-server.ts")], { stdout: "pipe", stderr: "inherit", env: { ...(process.env as Record<string, string>), ...env } });
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = "";
  while (!/url (\S+)\n/.test(text)) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the fake provider did not start");
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return { url: /url (\S+)\n/.exec(text)![1]!, stop: () => proc.kill("SIGTERM") };
}

/** Reads NDJSON lines from a stream, calling `onLine` with each parsed object until it returns true. */
export async function readNdjson(
  stream: ReadableStream<Uint8Array>,
  onLine: (value: Record<string, unknown>) => boolean | void,
): Promise<boolean> {
  for await (const batch of streamLines(stream)) {
    for (const line of batch) {
      if (!line.startsWith("{")) continue;
      let value: Record<string, unknown>;
      try {
        value = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      if (onLine(value) === true) return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------- memory

/** "1.23 0.98 0.75" from /proc/loadavg: how busy the shared machine was around a figure. */
export function loadAverage(): string {
  return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
}

/** This process's peak resident set (VmHWM), in MB. */
export function selfPeakRssMb(): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}

export const GNU_TIME = "/usr/bin/time";

/**
 * Runs a command and reports its peak RSS in MB: from GNU time's
 * "Maximum resident set size" when /usr/bin/time exists, else by polling
 * /proc/<pid>/status VmHWM until it exits (may miss a last-moment peak).
 */
export async function runWithPeakRss(
  cmd: string[],
  env: Record<string, string>,
  /** Killed after this long (runTimed's default otherwise). */
  timeoutMs?: number,
): Promise<{ ms: number; code: number | null; peakRssMb: number; how: string; stderr: string }> {
  if (existsSync(GNU_TIME)) {
    // GNU time writes its report to a file of its own (-o): the command's stderr stays separate.
    const dir = tempDir("atomic-bench-time-");
    try {
      const report = join(dir, "time.txt");
      const r = await runTimed([GNU_TIME, "-v", "-o", report, ...cmd], { env, capture: true, ...(timeoutMs ? { timeoutMs } : {}) });
      const text = readFileSync(report, "utf8");
      const m = /Maximum resident set size \(kbytes\): (\d+)/.exec(text);
      return { ms: r.ms, code: r.code, peakRssMb: m ? Number(m[1]) / 1024 : NaN, how: "/usr/bin/time -v", stderr: r.stderr };
    } finally {
      removeTempDir(dir);
    }
  }
  const t0 = performance.now();
  const proc = spawnTracked(cmd, { env, stdout: "ignore", stderr: "pipe" });
  const peak = watchPeakRss(proc.pid);
  const stderr = await new Response(proc.stderr as ReadableStream).text();
  await proc.exited;
  return { ms: performance.now() - t0, code: proc.exitCode, peakRssMb: peak.stop(), how: "/proc VmHWM polling", stderr };
}

/** Polls process `pid`'s VmHWM every 5 ms; `stop()` ends the polling and returns the highest value seen, in MB. */
export function watchPeakRss(pid: number): { stop(): number } {
  let peakKb = 0;
  const poll = setInterval(() => {
    try {
      const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      if (m) peakKb = Math.max(peakKb, Number(m[1]));
    } catch {
      // exited between polls
    }
  }, 5);
  return {
    stop() {
      clearInterval(poll);
      return peakKb / 1024;
    },
  };
}

/** Wall-clock milliseconds comparable across the processes of one machine (the pool trace's clock, src/pool/trace.ts). */
export function now(): number {
  return performance.timeOrigin + performance.now();
}

/** Polls `fn` every 2 ms until it gives a value. */
export async function waitFor<T>(what: string, fn: () => T | undefined, timeoutMs = 30_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(2);
  }
}

/**
 * The recovery benches' stage (bench/pool.ts, bench/fleet-recovery.ts): its
 * first run writes its worker's pid to `dir`/worker.pid and sleeps until
 * killed; run again, it prints "again" at once. `workerPid()` waits for the
 * first run to start.
 */
export function crashOnceStage(dir: string): { command: string; workerPid(timeoutMs?: number): Promise<number> } {
  return {
    command: `if [ ! -f ${dir}/once ]; then touch ${dir}/once; echo $PPID > ${dir}/worker.tmp; mv ${dir}/worker.tmp ${dir}/worker.pid; sleep 30; fi; echo again`,
    workerPid: (timeoutMs) =>
      waitFor(
        "the stage to start",
        () => {
          const f = join(dir, "worker.pid");
          return existsSync(f) ? Number(readFileSync(f, "utf8").trim()) : undefined;
        },
        timeoutMs,
      ),
  };
}
