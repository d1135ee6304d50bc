/**
 * For the service tests: a temp home per test, `atomic serve` started in it
 * (its NDJSON log read line by line), runs of fixtures/recoverable.ts, and
 * what the journal and the side-effect file hold. The drives a service
 * starts are detached from it (they outlive a SIGKILLed service, as they
 * should), so the cleanup after each test kills every process that carries
 * the test's home, not only the ones the test spawned. Tests that each keep
 * to their own home run concurrently (test/helpers/concurrent.ts); the cleanup then waits
 * until the last of them ended.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { killSpawned, lineWatcher, processesWithHome, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { isLive, processEnvironments } from "../helpers/processes.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { whenIdle } from "../helpers/concurrent.ts";

export const FIXTURE = join(import.meta.dir, "fixtures", "recoverable.ts");
export const NO_RECOVERY = join(import.meta.dir, "fixtures", "no-recovery.ts");

const homes: string[] = [];

/**
 * Registers the cleanup after each test (with concurrent tests, test/helpers/concurrent.ts: once none of
 * them is still running); call once at the top of a test file.
 */
export function serviceCleanup(): void {
  afterEach(
    whenIdle(async () => {
      await killSpawned();
      for (const home of homes) await killHome(home);
      removeTempDirs();
    }),
  );
  afterAll(() => {
    for (const home of homes) {
      expect(processesWithHome(home)).toEqual([]);
      expect(existsSync(home)).toBe(false);
    }
  });
}

async function killHome(home: string): Promise<void> {
  const pids = processesWithHome(home);
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
  await waitUntil(() => pids.every((p) => !isLive(p)), 10_000, "the home's processes to end");
}

export interface Setup {
  home: string;
  sideFile: string;
  gateFile: string;
}

export function newSetup(): Setup {
  const home = makeTempDir("atomic-service-");
  homes.push(home);
  return { home, sideFile: join(home, "side-effects.txt"), gateFile: join(home, "gate") };
}

/** The live drives the services of this home started (their environment says so; other homes' are not counted). */
export function drivesOf(s: Setup): number[] {
  return processEnvironments("ATOMIC_DRIVEN_BY", "service")
    .filter((p) => p.env.ATOMIC_HOME === s.home)
    .map((p) => p.pid);
}

export interface ServiceProc {
  proc: Subprocess<"pipe", "pipe", "pipe">;
  log: ReturnType<typeof lineWatcher>;
  /** The parsed log lines of this type, so far. */
  events(type: string): Record<string, unknown>[];
}

export function startService(s: Setup, args: string[] = [], env: Record<string, string> = {}): ServiceProc {
  const proc = spawnAtomic(["--home", s.home, "--json", "serve", "--port", "0", ...args], { home: s.home, env });
  const log = lineWatcher(proc.stdout);
  return {
    proc,
    log,
    events: (type) =>
      log.lines
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((e) => e.type === type),
  };
}

/** GET `path` of the service's status API, at the address and with the token its first log line names. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON of the API
export async function serviceApi(service: ServiceProc, path: string): Promise<any> {
  const serving = JSON.parse(service.log.lines[0]!) as { url: string; tokenFile: string };
  const token = (await Bun.file(serving.tokenFile).text()).trim();
  const res = await fetch(new URL(path, serving.url), { headers: { Authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  return res.json();
}

/**
 * Waits until the recovery duty finished two whole scans that began after
 * this call (GET /api/service counts them), or waits with an up-to-date view
 * (`waiting`): every run a scan would drive was driven by then, so a run
 * still not driven was looked at and left.
 */
export async function twoScansLater(service: ServiceProc): Promise<void> {
  const recovery = async () => (await serviceApi(service, "/api/service")).recovery as { scans: number; waiting: boolean };
  const from = (await recovery()).scans;
  // Or the duty waits for the journal to change (src/service/recovery.ts): its last scan found no unfinished
  // run, and nothing was committed since, so that scan saw the journal as it is now.
  await waitUntil(async () => {
    const now = await recovery();
    return now.waiting || now.scans >= from + 3;
  }, 30_000, "two more recovery scans");
}

/** Starts a run of the fixture, driven by this process (`atomic run --json`). */
export function startRun(s: Setup, mode: string, file = FIXTURE, env: Record<string, string> = {}, cwd?: string) {
  const proc = spawnAtomic(
    ["--home", s.home, "--json", "run", file, "--input", `sideFile=${s.sideFile}`, "--input", `gateFile=${s.gateFile}`, "--input", `mode=${mode}`],
    { home: s.home, env, ...(cwd ? { cwd } : {}) },
  );
  return { proc, out: lineWatcher(proc.stdout) };
}

export async function runIdOf(out: ReturnType<typeof lineWatcher>): Promise<string> {
  const line = await out.waitFor(/"runId":"[0-9a-z]+"/);
  return /"runId":"([0-9a-z]+)"/.exec(line)![1]!;
}

export async function kill9(proc: Subprocess): Promise<void> {
  proc.kill("SIGKILL");
  await proc.exited;
}

export interface Shown {
  run: { id: string; status: string; outputs: unknown; error: { code: string; message: string } | null };
  status: string;
  steps: { name: string; kind: string; status: string; position: string }[];
}

export async function show(s: Setup, runId: string): Promise<Shown> {
  const r = await runAtomic(["--home", s.home, "--json", "show", runId], { home: s.home });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as Shown;
}

export async function untilStatus(s: Setup, runId: string, status: string, timeoutMs = 60_000): Promise<Shown> {
  let last: Shown | undefined;
  try {
    return (await waitUntil(async () => {
      last = await show(s, runId);
      return last.status === status ? last : undefined;
    }, timeoutMs, `run ${runId} to be ${status}`)) as Shown;
  } catch (err) {
    throw new Error(`${(err as Error).message}; last seen: ${JSON.stringify(last?.status)} ${JSON.stringify(last?.run.error)}`);
  }
}

/** How often each line (an idempotency key) was appended to the side-effect file. */
export function sideEffects(s: Setup): Map<string, number> {
  const counts = new Map<string, number>();
  if (!existsSync(s.sideFile)) return counts;
  for (const line of readFileSync(s.sideFile, "utf8").split("\n")) if (line) counts.set(line, (counts.get(line) ?? 0) + 1);
  return counts;
}

/** Side-effect counts of the fixture's steps by name (a, b, gate, c: positions 0..3). */
export function countsByStep(s: Setup, runId: string): Record<string, number> {
  const e = sideEffects(s);
  const at = (pos: number) => e.get(`${runId}:${pos}`) ?? 0;
  return { a: at(0), b: at(1), gate: at(2), c: at(3) };
}

export const UNINTERRUPTED = { sum: 6, answer: "" };

/** Starts a run of another workflow file, driven by this process (`atomic run --json`). */
export function spawnRunOf(s: Setup, file: string, env: Record<string, string> = {}) {
  const proc = spawnAtomic(["--home", s.home, "--json", "run", file], { home: s.home, env });
  return { proc, out: lineWatcher(proc.stdout) };
}
