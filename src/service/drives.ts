/**
 * The drives the service starts: one child process per run, the binary
 * re-executing itself as `atomic resume <run> --json`.
 *
 * Why a process of its own and not a drive inside the service: a run's
 * workflow file is imported, and Bun keeps an imported module for the
 * process's lifetime (an edited file would never be read again, two runs of
 * one file would share its module state); a workflow that hangs its event
 * loop or leaks memory takes only its own process down; and a resume in a
 * process of its own is exactly `atomic resume`, with its checks (the
 * recorded directory and workflow file, the digest, replay) and its
 * cleanup of what an earlier drive left, so the service adds no second way
 * to drive a run. The child takes the run's lease itself: if another
 * process took it first, the child is refused and nothing happens twice.
 *
 * The child runs in the run's recorded directory, in a session of its own
 * (setsid: a Ctrl-C meant for the service's terminal is the service's to
 * handle), with ATOMIC_DRIVEN_BY=service (recorded in its run_resumed
 * event) and, for a journal URL, ATOMIC_JOURNAL (never in argv). Its
 * stdout (NDJSON) and stderr go to `<home>/service/logs/<run id>.log`, a
 * file, not a pipe to the service: a drive outlives a service that was
 * SIGKILLed (its run's lease keeps every other process off it). When the
 * drive exits, the service reads the end of what it wrote for its result
 * or error line.
 *
 * Stopping (service shutdown): SIGTERM, which `atomic resume` handles as a
 * first Ctrl-C (running stages end, the run records itself interrupted:
 * resumable); after STOP_GRACE_MS a child still alive gets SIGKILL, which
 * leaves its run crashed, and as resumable.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, fstatSync, mkdirSync, openSync, readSync } from "node:fs";
import { join } from "node:path";
import { selfCommand } from "../shared/self-exec.ts";
import type { RunId } from "../shared/ids.ts";
import type { Durability } from "../journal/journal.ts";
import { childEnv } from "../shared/config/environment.ts";

const STOP_GRACE_MS = 20_000;
/** How much of the end of a drive's output is read for its result line. */
const TAIL_BYTES = 64 * 1024;

/** How a drive ended, as the service reads it. */
export type DriveEnd =
  /**
   * The run recorded how this drive ended (completed, failed, blocked, cancelled, interrupted, awaiting input);
   * `lastRunId` when the drive followed a chain (ctx.continueAsNew) and its end is that of a later run.
   */
  | { kind: "ended"; status: string; code: number; lastRunId?: RunId }
  /** The child refused before driving (a usage error: its message says why; lease_held: someone else drives it). */
  | { kind: "refused"; errorCode: string; message: string; code: number }
  /** The child died without saying how its run ended: a crash of its driver. */
  | { kind: "crashed"; code: number | null; signal: string | null };

export interface DriveRequest {
  runId: RunId;
  cwd: string;
  home: string;
  journalUrl: string | undefined;
  durability?: Durability | undefined;
  /** More `atomic resume` flags (the service's `--workers`, `--lease-ms`). */
  args?: readonly string[];
}

export class Drive {
  readonly startedAt = Date.now();
  readonly done: Promise<DriveEnd>;
  readonly logPath: string;
  private readonly child: ChildProcess;

  constructor(req: DriveRequest) {
    const logs = join(req.home, "service", "logs");
    mkdirSync(logs, { recursive: true, mode: 0o700 });
    this.logPath = join(logs, `${req.runId}.log`);
    const logFd = openSync(this.logPath, "a", 0o600);
    // This drive's output starts here (the file keeps earlier drives' too).
    const from = fstatSync(logFd).size;
    const [cmd, ...args] = selfCommand("--home", req.home, ...(req.durability ? ["--durability", req.durability] : []), "--json", "resume", req.runId, ...(req.args ?? []));
    const env = childEnv({ ATOMIC_DRIVEN_BY: "service", ...(req.journalUrl !== undefined ? { ATOMIC_JOURNAL: req.journalUrl } : {}) });
    try {
      // Output to a file, not a pipe: a drive whose service dies goes on (a closed pipe would stop it).
      this.child = spawn(cmd!, args, { cwd: req.cwd, env, detached: true, stdio: ["ignore", logFd, logFd] });
    } finally {
      closeSync(logFd);
    }
    this.done = new Promise((resolve) => {
      this.child.once("error", () => resolve({ kind: "crashed", code: null, signal: null }));
      this.child.once("close", (code, signal) => {
        const last = signal === null ? lastOutcomeLine(this.logPath, from) : undefined;
        if (last?.type === "result" && typeof last.status === "string") {
          const lastRunId = typeof last.runId === "string" && last.runId !== req.runId ? (last.runId as RunId) : undefined;
          resolve({ kind: "ended", status: last.status, code: code ?? 0, ...(lastRunId ? { lastRunId } : {}) });
        }
        else if (last?.type === "error") resolve({ kind: "refused", errorCode: last.code ?? "error", message: last.message ?? "the drive was refused", code: code ?? 2 });
        else resolve({ kind: "crashed", code, signal });
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** SIGTERM (the run stops resumably), then SIGKILL after a grace period. Resolves when the child is gone. */
  async stop(): Promise<void> {
    this.signal("SIGTERM");
    const timer = setTimeout(() => this.signal("SIGKILL"), STOP_GRACE_MS);
    await this.done;
    clearTimeout(timer);
  }

  private signal(sig: NodeJS.Signals): void {
    try {
      this.child.kill(sig);
    } catch {
      // already gone
    }
  }
}

interface OutcomeLine {
  type?: string;
  /** A result's run: the chain's last when the drive followed one. */
  runId?: unknown;
  status?: string;
  code?: string;
  message?: string;
}

/** The last result or error line (`--json`) a drive wrote after `from` in its log. */
function lastOutcomeLine(path: string, from: number): OutcomeLine | undefined {
  let text: string;
  try {
    const fd = openSync(path, "r");
    try {
      const size = fstatSync(fd).size;
      const start = Math.max(from, size - TAIL_BYTES);
      const buf = Buffer.alloc(size - start);
      readSync(fd, buf, 0, buf.length, start);
      text = buf.toString("utf8");
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
  const lines = text.split("\n");
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i]!;
    if (!line.startsWith('{"type":"result"') && !line.startsWith('{"type":"error"')) continue;
    try {
      return JSON.parse(line) as OutcomeLine;
    } catch {
      return undefined; // cut short by a crash: the exit decides
    }
  }
  return undefined;
}
