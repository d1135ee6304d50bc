/**
 * Running the real binary from tests.
 *
 * `atomicBin()` is dist/atomic (scripts/test.sh builds it before the suite;
 * when a test file runs alone and the binary is missing or older than the
 * sources, it is built here once). `runAtomic` runs it to completion;
 * `spawnAtomic` starts it for tests that signal or kill it. Every spawned
 * process is tracked and killed in `killSpawned()` (call it in afterEach),
 * so no process outlives a test.
 */

import { mkdirSync, readFileSync, readdirSync } from "node:fs";
import { ROOT, atomicBin } from "../../scripts/binary.ts";
import { adoptTempDir } from "./temp.ts";
import { journalUrlForHome } from "./postgres.ts";
import { streamLines } from "./lines.ts";
import { join } from "node:path";
import type { Subprocess } from "bun";

export { ROOT };
export const BUN = process.execPath;
export { atomicBin };

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface AtomicOptions {
  home: string;
  cwd?: string;
  env?: Record<string, string | undefined>;
  timeoutMs?: number;
  stdin?: string;
  /** Run `bun src/main.ts` instead of the compiled binary. */
  fromSource?: boolean;
  /** A command that runs the binary's command line given after it (test/helpers/no-user-namespaces.ts). */
  wrap?: readonly string[];
}

/** This process's environment with `extra` over it (an undefined value removes the variable), without NODE_ENV (bun test sets it). */
export function childEnv(extra: Record<string, string | undefined> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...process.env, ...extra })) if (v !== undefined) env[k] = v;
  delete env.NODE_ENV;
  return env;
}

/**
 * A config every atomic of the tests reads last (ATOMIC_CONFIG; the engines the tests drive in their own
 * process too: test/engine/helpers.ts): host pressure by load is off, so a machine busy with other work
 * (CI, parallel test files) does not pace stage starts and stretch tests past their timeouts. Tests of
 * pacing configure it themselves (free memory) or pass their own ATOMIC_CONFIG.
 */
export const TEST_CONFIG = join(import.meta.dir, "test-config.json");

/** The environment a spawned atomic gets (for clients that spawn the binary themselves, such as an MCP client's transport). */
export function environment(opts: AtomicOptions): Record<string, string> {
  // ATOMIC_TEST_JOURNAL=postgres: the home's journal is a schema in the test cluster (test/helpers/postgres.ts).
  const journal = journalUrlForHome(opts.home);
  // The test cluster's admin URL (its superuser password) is the tests' own, not the binary's: the binary gets
  // its journal as a user gives it, and what it must keep from stages is what it knows to be secret.
  const env = childEnv({ NO_COLOR: "1", ATOMIC_HOME: opts.home, ATOMIC_CONFIG: TEST_CONFIG, ATOMIC_TEST_POSTGRES_URL: undefined, ...(journal ? { ATOMIC_JOURNAL: journal } : {}), ...opts.env });
  // Host-wide state of the user (per-user agent slots, in the runtime directory) stays with the test:
  // one private directory per home, next to it (not in it: tests check what a home holds), as
  // XDG_RUNTIME_DIR and TMPDIR.
  if (!opts.env?.TMPDIR) {
    const tmp = `${opts.home.replace(/\/+$/, "")}.tmp`;
    mkdirSync(tmp, { recursive: true, mode: 0o700 });
    adoptTempDir(tmp);
    env.TMPDIR = tmp;
    if (!("XDG_RUNTIME_DIR" in (opts.env ?? {}))) env.XDG_RUNTIME_DIR = tmp;
  }
  return env;
}

const spawned = new Set<Subprocess>();

export async function runAtomic(args: string[], opts: AtomicOptions): Promise<RunResult> {
  const proc = spawnAtomic(args, opts);
  const limitMs = opts.timeoutMs ?? 60_000;
  let killed = false;
  const timer = setTimeout(() => {
    killed = true;
    proc.kill("SIGKILL");
  }, limitMs);
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout as ReadableStream).text(),
    new Response(proc.stderr as ReadableStream).text(),
    proc.exited,
  ]);
  clearTimeout(timer);
  spawned.delete(proc);
  // Said where a failing test shows it: a command this helper killed printed nothing for another reason.
  return { code, stdout, stderr: killed ? `${stderr}[killed by the test's runAtomic after ${limitMs} ms]\n` : stderr };
}

/**
 * The JSON a command printed on stdout. When there is none (the command
 * failed, or was killed at runAtomic's timeout), the error says so with the
 * exit code and stderr, instead of JSON.parse's "Unexpected end of input".
 */
export function jsonOf<T = unknown>(r: RunResult): T {
  try {
    return JSON.parse(r.stdout) as T;
  } catch {
    throw new Error(`no JSON on stdout (exit ${r.code}); stdout: ${JSON.stringify(r.stdout.slice(0, 500))}; stderr: ${JSON.stringify(r.stderr.slice(-2000))}`);
  }
}

export function spawnAtomic(args: string[], opts: AtomicOptions): Subprocess<"pipe", "pipe", "pipe"> {
  const command = opts.fromSource ? [BUN, join(ROOT, "src", "main.ts")] : [atomicBin()];
  const proc = Bun.spawn([...(opts.wrap ?? []), ...command, ...args], {
    cwd: opts.cwd ?? ROOT,
    env: environment(opts),
    stdin: opts.stdin !== undefined ? new Blob([opts.stdin]) : "pipe",
    stdout: "pipe",
    stderr: "pipe",
  }) as Subprocess<"pipe", "pipe", "pipe">;
  spawned.add(proc);
  void proc.exited.then(() => spawned.delete(proc));
  return proc;
}

/** Kill every process a test started and is still running (afterEach). */
export async function killSpawned(): Promise<void> {
  const live = [...spawned];
  for (const p of live) p.kill("SIGKILL");
  await Promise.all(live.map((p) => p.exited));
  spawned.clear();
}

/** Reads a subprocess's stdout line by line, resolving when a line matches. */
export function lineWatcher(stream: ReadableStream<Uint8Array>) {
  const lines: string[] = [];
  const waiters: { re: RegExp; resolve: (line: string) => void }[] = [];
  let ended = false;
  void (async () => {
    for await (const batch of streamLines(stream)) {
      for (const line of batch) {
        lines.push(line);
        for (const w of [...waiters]) {
          if (w.re.test(line)) {
            waiters.splice(waiters.indexOf(w), 1);
            w.resolve(line);
          }
        }
      }
    }
    ended = true;
  })();
  return {
    lines,
    get ended() {
      return ended;
    },
    waitFor(re: RegExp, timeoutMs = 30_000): Promise<string> {
      const hit = lines.find((l) => re.test(l));
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`timed out waiting for ${re}; saw:\n${lines.join("\n")}`)), timeoutMs);
        waiters.push({ re, resolve: (l) => (clearTimeout(t), resolve(l)) });
      });
    },
    text: () => lines.join("\n"),
  };
}

/**
 * Poll `cond` until it is truthy (no fixed sleeps in tests). The pause after a check is four times what the
 * check took, at least 20 ms and at most 500 ms, so a wait spends about a fifth of its time checking: a
 * cheap check (a file, a variable) is polled every 20 ms, while one that spawns the binary (`atomic show`,
 * 60-100 CPU-ms), scans /proc or asks a service no longer takes most of a core for the whole wait.
 */
export async function waitUntil<T>(cond: () => T | Promise<T>, timeoutMs = 30_000, what = "condition"): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const checked = Date.now();
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(Math.min(500, Math.max(20, 4 * (Date.now() - checked))));
  }
}

/**
 * Waits for `event` while `proc` runs: fails at once if the process ends first (with the end of what it
 * wrote to stderr, when the caller reads it, in `describe`), or after `limitMs`, a last-resort bound named
 * by the caller, never a measure of speed.
 */
export async function untilEvent<T>(event: Promise<T>, what: string, opts: { proc?: { exited: Promise<number> }; limitMs: number; describe?: () => string | Promise<string> }): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const failures: Promise<never>[] = [
    new Promise<never>((_, reject) => {
      timer = setTimeout(async () => reject(new Error(`timed out after ${opts.limitMs / 1000} s waiting for ${what}${opts.describe ? `; ${await opts.describe()}` : ""}`)), opts.limitMs);
    }),
  ];
  if (opts.proc) failures.push(opts.proc.exited.then(async (code) => Promise.reject(new Error(`the process ended (exit ${code}) before ${what}${opts.describe ? `; ${await opts.describe()}` : ""}`))));
  try {
    return await Promise.race([event, ...failures]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Pids of processes whose command line or environment contains `needle`
 * (for orphan checks: atomic's own processes carry their home in their
 * environment, ATOMIC_HOME or their role's configuration, never in argv).
 * With `role`, only processes whose command line also contains it.
 * Needs root: atomic's processes are non-dumpable (shared/non-dumpable.ts),
 * so a user without CAP_SYS_PTRACE cannot read their environment.
 */
export function processesMatching(needle: string, role?: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8").replaceAll("\0", " ");
      if (role !== undefined && !cmdline.includes(role)) continue;
      if (cmdline.includes(needle) || readFileSync(`/proc/${name}/environ`, "utf8").includes(needle)) pids.push(pid);
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids;
}

/** SIGKILL to every process of `home` (processesWithHome); one listed may end before its kill (a git the root ran, say). */
export function killProcessesWithHome(home: string): void {
  for (const pid of processesWithHome(home)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // ended meanwhile
    }
  }
}

/** Live (not zombie) processes whose environment names `home` as ATOMIC_HOME (a run's root, coordinator and workers all do). */
export function processesWithHome(home: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (!readFileSync(`/proc/${name}/environ`, "utf8").split("\0").includes(`ATOMIC_HOME=${home}`)) continue;
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      if (stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z") pids.push(Number(name));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids;
}
