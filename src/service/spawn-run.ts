/**
 * Starting a run that this process does not drive: a detached child of the
 * binary, `atomic run <workflow> --id <run id> --inputs-json <file>`, in the
 * directory the run belongs to. The service uses it for runs posted to its
 * API and for schedule ticks, `atomic schedule trigger` too.
 *
 * Who drives the run: when a service with recovery runs on the journal
 * (leaveToService), the child adds `--detach`: it records the run and
 * leaves it, and the service's recovery duty drives it as it drives every
 * run it recovers (recovery.ts, drives.ts: its limit of runs at once,
 * stopping resumably on SIGTERM, the back-off after crashes). Otherwise
 * (`serve --no-recover`, no service, a workflow with `recover: false`) the
 * child drives the run itself, an ordinary driver in a session of its own
 * that outlives the process that started it.
 *
 * The run id is chosen before the child starts, and the child's start is
 * keyed by it (engine/keyed-start.ts): a second spawn for the same id, by
 * this service or another, never makes a second run. Nothing secret goes on
 * the command line (every user can read /proc/<pid>/cmdline): the inputs go
 * in a 0600 file, the home and the journal URL through the environment.
 * The child's output goes to `$ATOMIC_HOME/service/logs/<run id>.log`.
 *
 * Waiting for the child (awaitRecorded, awaitResumed): it says on a pipe
 * when its run is recorded (shared/ready-pipe.ts), so the starter blocks on
 * that pipe and then reads the journal once; the pipe's end without that
 * line means the child ended first, and its log says why.
 */

import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { EVENT } from "../engine/journal-events.ts";
import { loadWorkflowFile } from "../engine/loader.ts";
import type { Journal } from "../journal/journal.ts";
import type { RunRecord } from "../journal/runs.ts";
import type { RunId } from "../shared/ids.ts";
import { selfCommand } from "../shared/self-exec.ts";
import { activeService } from "./service-lease.ts";
import { childEnv } from "../shared/config/environment.ts";
import { READY_FD, readyLine } from "../shared/ready-pipe.ts";
import type { Readable } from "node:stream";

export interface DetachedStart {
  /** What `atomic run` takes: a file path or `builtin:NAME`. */
  workflow: string;
  inputs: Record<string, unknown>;
  runId: RunId;
  cwd: string;
  home: string;
  /** The journal URL, when it is not the home's SQLite file. */
  journalUrl?: string;
  /** Record the run and leave it to the service's recovery duty (`run --detach`), instead of driving it in the child. */
  leaveToService: boolean;
  /** How the run was started: recorded in its run_started (journal/run-origin.ts), through ATOMIC_STARTED_BY. */
  startedBy: "api" | "schedule";
}

export interface SpawnedRun {
  logPath: string;
  pid: number | undefined;
  /** Resolves with the child's exit code (null: killed by a signal). */
  exited: Promise<number | null>;
  /** What the child said on its ready pipe within `timeoutMs`: "ready" once its run (or resume) is recorded. */
  ready(timeoutMs: number): Promise<"ready" | "closed" | "timeout">;
}

export function serviceDir(home: string, ...parts: string[]): string {
  return join(home, "service", ...parts);
}

export function spawnRunDriver(start: DetachedStart): SpawnedRun {
  const logs = serviceDir(start.home, "logs");
  const inputsDir = serviceDir(start.home, "inputs");
  mkdirSync(logs, { recursive: true, mode: 0o700 });
  mkdirSync(inputsDir, { recursive: true, mode: 0o700 });
  const inputsFile = join(inputsDir, `${start.runId}.json`);
  writeFileSync(inputsFile, JSON.stringify(start.inputs), { mode: 0o600 });
  const spawned = spawnDetached({ ...start, env: { ATOMIC_STARTED_BY: start.startedBy } }, ["run", start.workflow, "--id", start.runId, "--inputs-json", inputsFile, ...(start.leaveToService ? ["--detach"] : [])]);
  // The inputs file has served once the child read it; gone with the child at the latest.
  void spawned.exited.then(() => rmSync(inputsFile, { force: true }));
  return spawned;
}

/**
 * `atomic resume <run id>` in a detached child, as spawnRunDriver starts
 * runs: with `--detach` when the service's recovery duty is to drive it,
 * else the child drives it. The child runs the rest where the run started
 * (resume reads the recorded directory), so `cwd` only places the child.
 */
export function spawnResumeDriver(start: { runId: RunId; cwd: string; home: string; journalUrl?: string; leaveToService: boolean }): SpawnedRun {
  mkdirSync(serviceDir(start.home, "logs"), { recursive: true, mode: 0o700 });
  return spawnDetached(start, ["resume", start.runId, ...(start.leaveToService ? ["--detach"] : [])]);
}

/**
 * `atomic rerun <run> --id <new id>` (with `--inputs-json`, the inputs to
 * change) or `atomic fork <run> --at STEP --id <new id>` in a detached
 * child, as spawnRunDriver starts runs; the child loads the old run's
 * workflow in its recorded directory, so `cwd` only places the child.
 */
export function spawnNewRunFrom(start: {
  kind: "rerun" | "fork";
  from: RunId;
  runId: RunId;
  inputs?: Record<string, unknown> | undefined;
  at?: string | undefined;
  cwd: string;
  home: string;
  journalUrl?: string;
  leaveToService: boolean;
}): SpawnedRun {
  mkdirSync(serviceDir(start.home, "logs"), { recursive: true, mode: 0o700 });
  const argv = [start.kind, start.from, "--id", start.runId];
  let inputsFile: string | undefined;
  if (start.kind === "fork") argv.push("--at", start.at ?? "");
  else if (start.inputs && Object.keys(start.inputs).length > 0) {
    mkdirSync(serviceDir(start.home, "inputs"), { recursive: true, mode: 0o700 });
    inputsFile = serviceDir(start.home, "inputs", `${start.runId}.json`);
    writeFileSync(inputsFile, JSON.stringify(start.inputs), { mode: 0o600 });
    argv.push("--inputs-json", inputsFile);
  }
  if (start.leaveToService) argv.push("--detach");
  const spawned = spawnDetached({ ...start, env: { ATOMIC_STARTED_BY: "api" } }, argv);
  if (inputsFile) void spawned.exited.then(() => rmSync(inputsFile, { force: true }));
  return spawned;
}

function spawnDetached(start: { runId: RunId; cwd: string; home: string; journalUrl?: string; env?: { ATOMIC_STARTED_BY: string } }, argv: string[]): SpawnedRun {
  const logPath = serviceDir(start.home, "logs", `${start.runId}.log`);
  const log = openSync(logPath, "a", 0o600);
  const env = childEnv({ ATOMIC_HOME: start.home, NO_COLOR: "1", ATOMIC_JOURNAL: start.journalUrl || undefined, ATOMIC_READY_FD: String(READY_FD), ...start.env });
  const [cmd, ...args] = selfCommand(argv[0]!, ...argv.slice(1));
  let child;
  try {
    child = spawn(cmd!, args, { cwd: start.cwd, env, detached: true, stdio: ["ignore", log, log, "pipe"] });
  } finally {
    closeSync(log);
  }
  const exited = new Promise<number | null>((resolve) => {
    child.once("exit", (code) => resolve(code));
    child.once("error", () => resolve(null));
  });
  child.unref();
  const pipe = child.stdio[READY_FD] as Readable | null;
  // Nobody reading it keeps this process alive for the child's sake (readyLine's own deadline does, while it waits).
  (pipe as { unref?: () => void } | null)?.unref?.();
  return { logPath, pid: child.pid, exited, ready: (timeoutMs) => readyLine(pipe, timeoutMs) };
}

/**
 * Whether a start leaves its run to the service's recovery duty: recovery is
 * on, a service is active on the journal, and the workflow has not opted out
 * of recovery (`recover: false`: nobody would ever drive it then).
 */
export async function leaveToService(journal: Journal, recover: boolean, workflow: string | { recover?: boolean }): Promise<boolean> {
  if (!recover || !(await activeService(journal))) return false;
  const definition = typeof workflow === "string" ? (await loadWorkflowFile(workflow)).definition : workflow;
  return definition.recover !== false;
}

/**
 * Waits until the spawned child recorded its run (or found it recorded),
 * or exited without: then the last line of its log says why.
 */
export async function awaitRecorded(journal: Journal, runId: RunId, spawned: SpawnedRun, timeoutMs = 30_000): Promise<RunRecord | { failed: string }> {
  const deadline = Date.now() + timeoutMs;
  const said = await spawned.ready(timeoutMs);
  const run = await journal.getRun(runId);
  if (run) return run;
  const code = said === "closed" ? await exitWithin(spawned, deadline) : undefined;
  if (code !== undefined) return { failed: lastError(spawned.logPath) ?? `the run's process exited with code ${code} before recording it` };
  return { failed: `the run's process did not record run ${runId} within ${timeoutMs / 1000}s (see ${spawned.logPath})` };
}

/**
 * Waits until the spawned `atomic resume` recorded its `run_resumed` (after
 * `afterSeq`, the run's last event before it), or exited without: then the
 * last line of its log says why (the same sentence `atomic resume` prints).
 */
export async function awaitResumed(journal: Journal, runId: RunId, afterSeq: number, spawned: SpawnedRun, timeoutMs = 30_000): Promise<{ resumed: true } | { failed: string }> {
  const deadline = Date.now() + timeoutMs;
  const said = await spawned.ready(timeoutMs);
  if ((await journal.readEvents(runId, afterSeq)).some((e) => e.type === EVENT.runResumed)) return { resumed: true };
  const code = said === "closed" ? await exitWithin(spawned, deadline) : undefined;
  if (code !== undefined) return { failed: lastError(spawned.logPath) ?? `the resuming process exited with code ${code} before resuming the run` };
  return { failed: `the resuming process did not resume run ${runId} within ${timeoutMs / 1000}s (see ${spawned.logPath})` };
}

/** The child closed its pipe without saying it was ready: its exit code (-1: a signal) once it ends, unless that is after `deadline`. */
async function exitWithin(spawned: SpawnedRun, deadline: number): Promise<number | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), Math.max(0, deadline - Date.now()))));
  try {
    const code = await Promise.race([spawned.exited, late]);
    return code === undefined ? undefined : (code ?? -1);
  } finally {
    clearTimeout(timer);
  }
}

/** The child's `error: …` sentence, if it printed one. */
function lastError(logPath: string): string | undefined {
  let text: string;
  try {
    text = readFileSync(logPath, "utf8");
  } catch {
    return undefined;
  }
  const line = text.split("\n").reverse().find((l) => l.startsWith("error: "));
  return line?.slice("error: ".length).replace(/\.$/, "");
}
