/**
 * Shared pieces of the end-to-end tests (test/e2e/*.test.ts), which drive
 * the real binary as a user would.
 *
 * Tests inside a file run concurrently (`e2eTest` = `test.concurrent`), but
 * tests that start heavy processes (real agent CLIs, a browser, a Postgres
 * cluster of their own) use `heavyTest`: at most as many of them run at once
 * as the machine has cores (test/helpers/heavy.ts). bun runs `afterEach` as
 * soon as each test ends while the others go on, so
 * the cleanup (`cleanupWhenIdle`) waits until no test of the file is still
 * running before it kills spawned processes and stage process groups and
 * removes temp dirs; `afterAll(cleanupNow)` is the safety net.
 *
 * Stage processes are found through pid files the fixture stages write
 * (`$E2E_DIR/<name>.pid`, the stage's `sh`, which leads its own process
 * group); `groupAlive` ignores zombies (in this container init reaps late).
 */

import { Database } from "bun:sqlite";
import { chmodSync, copyFileSync, existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { atomicBin, childEnv, killSpawned, runAtomic, TEST_CONFIG, waitUntil, type RunResult } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { heavyTestLimits } from "../helpers/heavy.ts";
import { concurrentTest, whenIdle } from "../helpers/concurrent.ts";

export const FIXTURES = join(import.meta.dir, "fixtures");
export const fixture = (name: string) => join(FIXTURES, name);

/** A test that runs concurrently with the file's other e2e tests (test/helpers/concurrent.ts). */
export function e2eTest(name: string, fn: () => Promise<void>, timeoutMs = 60_000): void {
  concurrentTest(name, fn, timeoutMs);
}

/**
 * An e2eTest of what no journal decides (the pool's processes, pipes and logs, in a file that scripts/test.sh
 * runs again on the Postgres journal): it runs on the suite's first pass only, not again on its Postgres pass
 * (ATOMIC_TEST_JOURNAL=postgres), where it would check the same thing a second time.
 */
export function journalFreeTest(name: string, fn: () => Promise<void>, timeoutMs = 60_000): void {
  if (process.env.ATOMIC_TEST_JOURNAL !== "postgres") e2eTest(name, fn, timeoutMs);
}

/**
 * A test that starts a heavy process (a real agent CLI, a browser, a Postgres cluster): concurrent with the
 * file's other tests, but it waits for one of the machine's heavy slots first; `limitMs` is its own limit,
 * counted from the moment it holds its slot (test/helpers/heavy.ts).
 */
export function heavyTest(name: string, fn: () => Promise<void>, limitMs: number): void {
  const limits = heavyTestLimits(name, limitMs);
  e2eTest(name, () => limits.run(fn), limits.bunTimeoutMs);
}

/** afterEach: clean up once no test of this file is still running. */
export const cleanupWhenIdle = whenIdle(() => cleanupNow());

export async function cleanupNow(): Promise<void> {
  const groups = [...stageGroups];
  stageGroups.clear();
  for (const pgid of groups) killGroup(pgid);
  for (const p of extraProcs) p.kill("SIGKILL");
  await Promise.all([...extraProcs].map((p) => p.exited));
  extraProcs.clear();
  await killSpawned();
  // no stage process may outlive the test that started it
  for (const pgid of groups) await waitUntil(() => !groupAlive(pgid), 10_000, `stage process group ${pgid} to end`);
  removeTempDirs();
}

// ---------------------------------------------------------------- stage processes

const stageGroups = new Set<number>();

function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, "SIGKILL");
  } catch {
    // already gone
  }
}

/** Waits for a stage's pid file and returns its process group id (tracked for cleanup). */
export async function stagePid(dir: string, name: string): Promise<number> {
  const file = join(dir, `${name}.pid`);
  const text = await waitUntil((): string | false => {
    if (!existsSync(file)) return false;
    const t = readFileSync(file, "utf8");
    return t.endsWith("\n") && t;
  }, 30_000, `pid file ${file}`);
  const pid = Number((text as string).trim());
  stageGroups.add(pid);
  return pid;
}

/** True while any non-zombie process of process group `pgid` exists. */
export function groupAlive(pgid: number): boolean {
  const r = Bun.spawnSync(["ps", "-eo", "pgid=,stat="], { stdout: "pipe" });
  return r.stdout
    .toString()
    .split("\n")
    .some((line) => {
      const [g, stat] = line.trim().split(/\s+/);
      return Number(g) === pgid && stat !== undefined && !stat.startsWith("Z");
    });
}

// ---------------------------------------------------------------- processes we spawn ourselves

const extraProcs = new Set<Subprocess>();

/** Runs a command (not through spawnAtomic) to its end, killed after timeoutMs; tracked for cleanup. */
export async function runCommand(
  cmd: string[],
  opts: { cwd?: string; env?: Record<string, string | undefined>; timeoutMs?: number } = {},
): Promise<RunResult> {
  const proc = Bun.spawn(cmd, { cwd: opts.cwd ?? FIXTURES, env: childEnv(opts.env), stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  extraProcs.add(proc);
  const timer = setTimeout(() => proc.kill("SIGKILL"), opts.timeoutMs ?? 60_000);
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  clearTimeout(timer);
  extraProcs.delete(proc);
  return { code, stdout, stderr };
}

/** Runs the binary inside a pseudo-terminal (util-linux `script`), so it sees a TTY on stdout. */
export const HAS_SCRIPT = Bun.which("script") !== null;

interface PtyOptions {
  home: string;
  cwd?: string;
  env?: Record<string, string | undefined>;
}

/**
 * `script` running the binary with `args` on a pseudo-terminal, and its
 * environment (colours allowed unless opts.env says). The line starts with
 * `exec`: `script` runs it with $SHELL -c, and a shell that stays between
 * (dash, when SHELL is unset as in CI) would die of the terminal's SIGINT and
 * report 130 for a binary that exited 0.
 */
function ptyCommand(args: string[], opts: PtyOptions): { cmd: string[]; env: Record<string, string | undefined> } {
  const line = ["exec", ...[atomicBin(), ...args].map(shellQuote)].join(" ");
  // the tests' config, as runAtomic gives it (test/helpers/atomic.ts: no pacing of stage starts by the suite's load)
  return { cmd: ["script", "-qec", line, "/dev/null"], env: { TERM: "xterm-256color", ATOMIC_HOME: opts.home, ATOMIC_CONFIG: TEST_CONFIG, NO_COLOR: undefined, ...opts.env } };
}

export async function runInPty(args: string[], opts: PtyOptions): Promise<RunResult> {
  const { cmd, env } = ptyCommand(args, opts);
  return runCommand(cmd, { cwd: opts.cwd ?? FIXTURES, env });
}

/**
 * Starts the binary inside a pseudo-terminal and keeps it running: `text()`
 * is what it drew so far, `ctrlC()` types Ctrl-C on the terminal (the line
 * discipline sends SIGINT to its foreground process group, as a keyboard
 * would), `exited` ends with the exit code of the binary.
 */
export function spawnInPty(args: string[], opts: PtyOptions) {
  const { cmd, env } = ptyCommand(args, opts);
  const proc = Bun.spawn(cmd, { cwd: opts.cwd ?? FIXTURES, env: childEnv(env), stdin: "pipe", stdout: "pipe", stderr: "pipe" });
  extraProcs.add(proc);
  void proc.exited.then(() => extraProcs.delete(proc));
  let text = "";
  const decoder = new TextDecoder();
  const drained = (async () => {
    for await (const chunk of proc.stdout) text += decoder.decode(chunk, { stream: true });
  })();
  const errText = new Response(proc.stderr).text();
  return {
    proc,
    text: () => text,
    /** For a failure message: whether `script` (and so the binary) still runs, and what it wrote to stderr if not. */
    async describe(): Promise<string> {
      if (proc.exitCode === null && proc.signalCode === null) return `still running; drawn so far:\n${text}`;
      return `exited (code ${proc.exitCode}, signal ${proc.signalCode}); stderr:\n${await errText}\ndrawn:\n${text}`;
    },
    ctrlC: () => {
      proc.stdin.write("\x03");
      void proc.stdin.flush();
    },
    exited: proc.exited.then(async (code) => (await drained, code)),
  };
}

export function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

// ---------------------------------------------------------------- running the unprivileged binary

/**
 * How to run the binary as a user who cannot write a 0555 directory: as
 * root (who can) through `setpriv` as nobody; otherwise as ourselves.
 * Returns the command prefix, the binary path to use (a world-readable copy
 * in `dir` when nobody cannot run the original) or undefined when neither works.
 */
export async function unprivilegedRunner(dir: string): Promise<{ prefix: string[]; bin: string } | undefined> {
  if (process.getuid?.() !== 0) return { prefix: [], bin: atomicBin() };
  if (!Bun.which("setpriv")) return undefined;
  const prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"];
  chmodSync(dir, 0o755);
  const direct = await runCommand([...prefix, atomicBin(), "version"], { cwd: dir });
  if (direct.code === 0) return { prefix, bin: atomicBin() };
  const copy = join(dir, "atomic");
  copyFileSync(atomicBin(), copy);
  chmodSync(copy, 0o755);
  const viaCopy = await runCommand([...prefix, copy, "version"], { cwd: dir });
  return viaCopy.code === 0 ? { prefix, bin: copy } : undefined;
}

// ---------------------------------------------------------------- the journal, read from outside

export interface JournalCounts {
  runs: number;
  events: number;
  leases: number;
}

/** Row counts of the journal in `home` (all zero when there is no database file). */
export function journalCounts(home: string): JournalCounts {
  const path = join(home, "atomic.db");
  if (!existsSync(path)) return { runs: 0, events: 0, leases: 0 };
  const db = new Database(path, { readonly: true });
  try {
    const count = (table: string) => db.query<{ n: number }, []>(`select count(*) as n from ${table}`).get()!.n;
    return { runs: count("runs"), events: count("events"), leases: count("leases") };
  } finally {
    db.close();
  }
}

/** Every file in `dir` with its bytes, to prove a command left it untouched. */
export function snapshotDir(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      for (const [name, digest] of Object.entries(snapshotDir(path))) out[`${entry.name}/${name}`] = digest;
    } else {
      out[entry.name] = new Bun.CryptoHasher("sha256").update(readFileSync(path)).digest("hex");
    }
  }
  return out;
}

// ---------------------------------------------------------------- CLI output

/** Root runs as `atomic runs --json` prints them. */
export async function listRuns(home: string): Promise<Record<string, unknown>[]> {
  const r = await runAtomic(["runs", "--json"], { home });
  if (r.code !== 0) throw new Error(`atomic runs --json failed (${r.code}): ${r.stderr}`);
  return parseNdjson(r.stdout);
}

export function parseNdjson(text: string): Record<string, unknown>[] {
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** The run id from the `started run <id> (...)` line. */
export function startedRunId(line: string): string {
  const m = /started run ([0-9a-z]{18})/.exec(line);
  if (!m) throw new Error(`no run id in ${JSON.stringify(line)}`);
  return m[1]!;
}

export const STACK_LINE = /^\s+at /m;
// eslint-disable-next-line no-control-regex
export const ANSI = /\x1b\[/;
// eslint-disable-next-line no-control-regex
export const SGR = /\x1b\[[0-9;]*m/;

/**
 * An error as the CLI must print it: one `error: ...` sentence, optionally
 * one `hint: ...` line, nothing else on stderr, and no stack trace.
 */
export function expectOneSentenceError(stderr: string): { message: string; hint: string | undefined } {
  const lines = stderr.split("\n");
  if (lines.at(-1) === "") lines.pop();
  const ok =
    (lines.length === 1 || lines.length === 2) &&
    /^error: \S.*\.$/.test(lines[0] ?? "") &&
    (lines.length === 1 || /^hint: \S/.test(lines[1] ?? "")) &&
    !STACK_LINE.test(stderr);
  if (!ok) throw new Error(`stderr is not one error sentence plus an optional hint:\n${stderr}`);
  return { message: lines[0]!.slice("error: ".length), hint: lines[1]?.slice("hint: ".length) };
}

export { makeTempDir };
