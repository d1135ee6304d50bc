/**
 * Shared parts of the worker-host benchmarks (issue 16, "Speed"):
 * bench/fleet-scale.ts, fleet-dispatch.ts and fleet-recovery.ts.
 *
 * - The database: a throw-away cluster (test/helpers/postgres.ts) with a
 *   database `bench` in it; every binary gets its URL with `--journal`.
 * - A host is `dist/atomic worker` as a user starts it: its own
 *   ATOMIC_HOME (in memory where /dev/shm exists, admission pacing off as
 *   in bench/pool.ts), its own `--host-id`, on loopback, in a process group
 *   of its own. It is ready when its coordinator said so on stderr and each
 *   of its workers wrote `ready` to its log (worker-logs/). `stop()` asks it
 *   to stop at once (SIGINT: it kills its workers and their stages) and
 *   SIGKILLs whatever of its process tree is left after a few seconds;
 *   `kill()` SIGKILLs the whole tree at once (a host crash).
 * - A root is `dist/atomic --json run bench/workflows/pool.ts` with its own
 *   home; what a run did is read back from the journal (`readRun`): its
 *   events and its work items (which worker, so which host, ran each).
 */

import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { PostgresJournal } from "../src/journal/postgres/postgres-journal.ts";
import type { JournalEvent, RunRecord } from "../src/journal/runs.ts";
import type { WorkItem } from "../src/journal/work-queue.ts";
import type { RunId } from "../src/shared/ids.ts";
import { createDatabase, startCluster, type Cluster } from "../test/helpers/postgres.ts";
import { TMPFS, WORKFLOWS, binaryEnv, spawnTracked, tempDir } from "./lib.ts";

export const POOL_WF = join(WORKFLOWS, "pool.ts");

// ---------------------------------------------------------------- the database

export interface FleetDb {
  url: string;
  /** The journal, opened by this process to read what runs recorded. */
  journal: PostgresJournal;
  /** CPU time of the Postgres server's processes so far (ms; backends that ended included). */
  cpuMs(): number;
  stop(): Promise<void>;
}

export async function fleetDatabase(): Promise<FleetDb> {
  const cluster: Cluster = await startCluster({ durable: true });
  try {
    const url = await createDatabase(cluster, "bench");
    const journal = await PostgresJournal.open(url);
    const postmaster = Number(readFileSync(join(cluster.dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
    return {
      url,
      journal,
      cpuMs: () => cpuMsOf(processTree(postmaster).map((p) => p.pid)),
      async stop() {
        await journal.close().catch(() => {});
        cluster.stop();
      },
    };
  } catch (err) {
    cluster.stop();
    throw err;
  }
}

/** A fresh home (in memory where there is /dev/shm), admission pacing off (bench/pool.ts says why). */
export function benchHome(prefix: string): string {
  const home = tempDir(prefix, TMPFS);
  writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { maxLoadPerCpu: 1_000_000 } }));
  return home;
}

// ---------------------------------------------------------------- process trees

function status(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return undefined;
  }
}

/** Whether `pid` runs (a zombie does not). */
export function alive(pid: number): boolean {
  const s = status(pid);
  return s !== undefined && !/State:\s+Z/.test(s);
}

/** A process, named by its pid and its start time (so a later owner of the pid is not taken for it). */
export interface Proc {
  pid: number;
  start: string;
}

function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

/** `pid` and every process below it (by /proc PPid), parents first. */
export function processTree(pid: number): Proc[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    const p = Number(entry);
    if (!Number.isInteger(p)) continue;
    const ppid = Number(/PPid:\s+(\d+)/.exec(status(p) ?? "")?.[1]);
    if (!children.has(ppid)) children.set(ppid, []);
    children.get(ppid)!.push(p);
  }
  const out: Proc[] = [];
  const walk = (p: number) => {
    const start = startTime(p);
    if (start === undefined) return;
    out.push({ pid: p, start });
    for (const c of children.get(p) ?? []) walk(c);
  };
  walk(pid);
  return out;
}

/** SIGKILL to each of these processes that still runs (the same pid with the same start time). */
export function killSame(procs: readonly Proc[]): void {
  for (const p of procs) {
    if (startTime(p.pid) !== p.start) continue;
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
}

/** CPU time (user + system, of the process and of its children it waited for) of these processes, ms. */
export function cpuMsOf(pids: readonly number[]): number {
  const tick = 1000 / 100; // USER_HZ
  let sum = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      // Fields 14-17 of stat (utime, stime, cutime, cstime): 11-14 here, the first two fields cut off.
      sum += (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * tick;
    } catch {
      // gone
    }
  }
  return sum;
}

/** The machine's CPU time, busy and total, from /proc/stat (ms, all CPUs). */
export function machineCpu(): { busy: number; total: number } {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0]!;
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const total = v.reduce((a, b) => a + b, 0) * 10;
  const idle = (v[3]! + (v[4] ?? 0)) * 10;
  return { busy: total - idle, total };
}

// ---------------------------------------------------------------- pool traces

/** A pool-trace line (src/pool/trace.ts): an event of a work item, at a wall-clock time (ms). */
export interface TraceLine {
  event: string;
  workId: string;
  at: number;
}

export function traceLines(text: string): TraceLine[] {
  const out: TraceLine[] = [];
  for (const line of text.split("\n")) {
    const m = /^pool-trace (\S+) (\S+) (\S+)$/.exec(line);
    if (m) out.push({ event: m[1]!, workId: m[2]!, at: Number(m[3]) });
  }
  return out;
}

/** The pool-trace lines of every log in a worker-logs directory. */
export function logTraces(dir: string): TraceLine[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((file) => traceLines(readFileSync(join(dir, file), "utf8")));
}

/** The first time of `event` per work item. */
export function firstOf(lines: readonly TraceLine[], event: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const l of lines) {
    if (l.event !== event) continue;
    const seen = out.get(l.workId);
    if (seen === undefined || l.at < seen) out.set(l.workId, l.at);
  }
  return out;
}

// ---------------------------------------------------------------- hosts

export interface HostOptions {
  slots: number;
  leaseMs?: number;
  /** ATOMIC_POOL_TRACE=1: its workers write pool-trace lines to their logs (src/pool/trace.ts). */
  trace?: boolean;
}

export class Host {
  private stderr = "";
  constructor(
    readonly id: string,
    readonly home: string,
    readonly proc: Subprocess,
    readonly slots: number,
  ) {
    void (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of proc.stderr as ReadableStream<Uint8Array>) this.stderr += decoder.decode(chunk, { stream: true });
    })().catch(() => {});
  }

  get pid(): number {
    return this.proc.pid;
  }

  get log(): string {
    return this.stderr;
  }

  /** Its coordinator said ready and every worker wrote `ready` to its log. */
  async ready(timeoutMs = 60_000): Promise<void> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
        throw new Error(`worker host ${this.id} exited (${this.proc.exitCode ?? this.proc.signalCode}) before it was ready: ${this.stderr.slice(-800)}`);
      }
      if (this.stderr.includes("worker host ready") && this.readyWorkers() >= this.slots) return;
      if (Date.now() > until) throw new Error(`worker host ${this.id} not ready within ${timeoutMs} ms: ${this.stderr.slice(-800)}`);
      await Bun.sleep(20);
    }
  }

  private readyWorkers(): number {
    const dir = join(this.home, "worker-logs");
    if (!existsSync(dir)) return 0;
    return readdirSync(dir).filter((f) => {
      try {
        return / ready \(pid \d+\)/.test(readFileSync(join(dir, f), "utf8"));
      } catch {
        return false;
      }
    }).length;
  }

  /** The pool-trace lines (with `trace`) of this host's coordinator (its stderr) and workers (their logs). */
  traces(): TraceLine[] {
    return [...traceLines(this.stderr), ...logTraces(join(this.home, "worker-logs"))];
  }

  /** What the host and its workers logged besides starting and trace lines (for a run that failed). */
  diagnostics(): string {
    const dir = join(this.home, "worker-logs");
    const logs = existsSync(dir) ? readdirSync(dir).map((f) => readFileSync(join(dir, f), "utf8")) : [];
    const lines = [this.stderr, ...logs]
      .flatMap((t) => t.split("\n"))
      .filter((l) => l.trim() !== "" && !l.startsWith("pool-trace ") && !/ ready( \(pid \d+\)|: host )|serving .* with \d+ slot|home was open/.test(l));
    return lines.length === 0 ? `host ${this.id}: nothing logged` : `host ${this.id}:\n${lines.slice(-20).join("\n")}`;
  }

  /** A crash: SIGKILL of every process of the host (coordinator, workers, their guards, stages) at once. Returns their pids. */
  kill(): number[] {
    const tree = processTree(this.pid);
    killSame(tree);
    return tree.map((p) => p.pid);
  }

  /** Stops at once (SIGINT), then SIGKILLs whatever of its tree is left after `graceMs`. */
  async stop(graceMs = 10_000): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const tree = processTree(this.pid);
    this.proc.kill("SIGINT");
    const timer = setTimeout(() => this.kill(), graceMs);
    await this.proc.exited;
    clearTimeout(timer);
    // Anything it left behind (it should have left nothing): only the very processes seen, not their pids' next owners.
    killSame(tree);
  }
}

/** Starts `atomic worker` with a home of its own; resolves once it is ready. */
export async function startHost(bin: string, url: string, id: string, opts: HostOptions): Promise<Host> {
  const home = benchHome(`atomic-bench-host-${id}-`);
  const workdir = tempDir(`atomic-bench-wd-${id}-`, TMPFS);
  const args = [bin, "worker", "--journal", url, "--host-id", id, "--slots", String(opts.slots), "--workdir", workdir];
  if (opts.leaseMs !== undefined) args.push("--work-lease-ms", String(opts.leaseMs));
  const proc = spawnTracked(args, {
    env: binaryEnv(home, opts.trace ? { ATOMIC_POOL_TRACE: "1" } : {}),
    stdout: "ignore",
    stderr: "pipe",
    detached: true,
  });
  const host = new Host(id, home, proc, opts.slots);
  try {
    await host.ready();
  } catch (err) {
    await host.stop(2_000);
    throw err;
  }
  return host;
}

export async function startHosts(bin: string, url: string, ids: readonly string[], opts: HostOptions): Promise<Host[]> {
  // One after another: on a 2-CPU machine starting them at once only makes each slower.
  const hosts: Host[] = [];
  try {
    for (const id of ids) hosts.push(await startHost(bin, url, id, opts));
  } catch (err) {
    await stopHosts(hosts);
    throw err;
  }
  return hosts;
}

export async function stopHosts(hosts: readonly Host[]): Promise<void> {
  await Promise.all(hosts.map((h) => h.stop()));
}

// ---------------------------------------------------------------- roots

export function runArgs(bin: string, url: string, inputs: Record<string, string | number>, workers: number, extra: string[] = []): string[] {
  const list = Object.entries(inputs).flatMap(([k, v]) => ["--input", `${k}=${v}`]);
  return [bin, "--json", "run", POOL_WF, ...list, "--journal", url, "--workers", String(workers), ...extra];
}

/** Why a root run failed: its stderr, else the last lines of its `--json` output (the error is in its `result` event). */
export function failure(r: { stdout: string; stderr: string }): string {
  const err = r.stderr.trim();
  if (err) return err.slice(-800);
  return r.stdout.trim().split("\n").slice(-3).join("\n").slice(-1500);
}

/** The root run's id, from its `--json` output. */
export function rootRunId(stdout: string): RunId {
  for (const line of stdout.split("\n")) {
    if (!line.startsWith("{")) continue;
    try {
      const e = JSON.parse(line) as { type?: string; parentId?: unknown; runId?: string };
      if (e.type === "run_started" && e.parentId === null && e.runId) return e.runId as RunId;
    } catch {
      // not an event line
    }
  }
  throw new Error("no run_started event in the run's --json output");
}

export interface RecordedRun {
  run: RunRecord;
  events: JournalEvent[];
  items: WorkItem[];
}

export async function readRun(journal: PostgresJournal, runId: RunId): Promise<RecordedRun> {
  const run = await journal.getRun(runId);
  if (!run) throw new Error(`run ${runId} is not in the journal`);
  const events: JournalEvent[] = [];
  for (;;) {
    const page = await journal.readEvents(runId, events.at(-1)?.seq ?? 0, 1_000);
    events.push(...page);
    if (page.length < 1_000) break;
  }
  return { run, events, items: await journal.work.list(runId) };
}

/**
 * Per stage (event key): when its attempt was enqueued and its work item's
 * id. The `step_started` record enqueues the item in its commit; its time is
 * the root's clock as the append went out (the commit's round trip after it).
 */
export function enqueuedAt(events: readonly JournalEvent[]): Map<string, { at: number; workId: string; requestedAt: number }> {
  const out = new Map<string, { at: number; workId: string; requestedAt: number }>();
  for (const e of events) {
    if (e.type !== "step_started" || e.key === null) continue;
    const p = e.payload as { workId?: string; requestedAt?: number };
    out.set(e.key, { at: e.at, workId: String(p.workId), requestedAt: p.requestedAt ?? NaN });
  }
  return out;
}

/** Per stage (event key): its checkpoint record: when the root recorded its result, and `startedAt` (its runner started, on whichever host). */
export function checkpoints(events: readonly JournalEvent[]): Map<string, { at: number; startedAt: number }> {
  const out = new Map<string, { at: number; startedAt: number }>();
  for (const e of events) {
    if (e.type !== "checkpoint" || e.key === null) continue;
    const startedAt = (e.payload as { startedAt?: number } | null)?.startedAt;
    if (typeof startedAt === "number") out.set(e.key, { at: e.at, startedAt });
  }
  return out;
}

/** How many of a run's items each host ran (worker ids are `<worker>@<host id>`; the root's own pool's have no `@`). */
export function itemsPerHost(items: readonly WorkItem[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const i of items) {
    const at = i.workerId?.lastIndexOf("@") ?? -1;
    const host = at < 0 ? "root" : i.workerId!.slice(at + 1);
    out.set(host, (out.get(host) ?? 0) + 1);
  }
  return out;
}

export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}
