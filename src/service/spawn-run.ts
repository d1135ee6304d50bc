/**
 * Starting a run that this process does not drive: a detached child of the
 * binary, `atomic run <workflow> --id <run id> --inputs-json <file>`, in the
 * directory the run belongs to. The service uses it for runs posted to its
 * API and for schedule ticks; the child is an ordinary driver (its own
 * process group, its lease, Ctrl-C of the service's terminal does not reach
 * it, and it outlives a service that stops), so a run started this way is
 * exactly a run started from a terminal.
 *
 * The run id is chosen before the child starts, and the child's start is
 * keyed by it (engine/keyed-start.ts): a second spawn for the same id, by
 * this service or another, never makes a second run. Nothing secret goes on
 * the command line (every user can read /proc/<pid>/cmdline): the inputs go
 * in a 0600 file, the home and the journal URL through the environment.
 * The child's output goes to `$ATOMIC_HOME/service/logs/<run id>.log`.
 */

import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Journal, RunRecord } from "../journal/types.ts";
import type { RunId } from "../shared/ids.ts";
import { selfCommand } from "../shared/self-exec.ts";

export interface DetachedStart {
  /** What `atomic run` takes: a file path or `builtin:NAME`. */
  workflow: string;
  inputs: Record<string, unknown>;
  runId: RunId;
  cwd: string;
  home: string;
  /** The journal URL, when it is not the home's SQLite file. */
  journalUrl?: string;
}

export interface SpawnedRun {
  logPath: string;
  pid: number | undefined;
  /** Resolves with the child's exit code (null: killed by a signal). */
  exited: Promise<number | null>;
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
  const logPath = join(logs, `${start.runId}.log`);
  const log = openSync(logPath, "a", 0o600);
  const env: NodeJS.ProcessEnv = { ...process.env, ATOMIC_HOME: start.home, NO_COLOR: "1" };
  if (start.journalUrl) env.ATOMIC_JOURNAL = start.journalUrl;
  else delete env.ATOMIC_JOURNAL;
  const [cmd, ...args] = selfCommand("run", start.workflow, "--id", start.runId, "--inputs-json", inputsFile);
  let child;
  try {
    child = spawn(cmd!, args, { cwd: start.cwd, env, detached: true, stdio: ["ignore", log, log] });
  } finally {
    closeSync(log);
  }
  const exited = new Promise<number | null>((resolve) => {
    child.once("exit", (code) => resolve(code));
    child.once("error", () => resolve(null));
  });
  // The inputs file has served once the child read it; gone with the child at the latest.
  void exited.then(() => rmSync(inputsFile, { force: true }));
  child.unref();
  return { logPath, pid: child.pid, exited };
}

/**
 * Waits until the spawned child recorded its run (or found it recorded),
 * or exited without: then the last line of its log says why.
 */
export async function awaitRecorded(journal: Journal, runId: RunId, spawned: SpawnedRun, timeoutMs = 30_000): Promise<RunRecord | { failed: string }> {
  let exitCode: number | null | undefined;
  void spawned.exited.then((code) => (exitCode = code === null ? -1 : code));
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const run = await journal.getRun(runId);
    if (run) return run;
    if (exitCode !== undefined) {
      // One more look: the run may have been recorded just before the child ended.
      const late = await journal.getRun(runId);
      if (late) return late;
      return { failed: lastError(spawned.logPath) ?? `the run's process exited with code ${exitCode} before recording it` };
    }
    if (Date.now() > deadline) return { failed: `the run's process did not record run ${runId} within ${timeoutMs / 1000}s (see ${spawned.logPath})` };
    await Bun.sleep(25);
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
