/**
 * Where `run` and `resume` execute stages: on the worker pool (default,
 * `--workers N`, default min(4, CPUs)) or in this process (`--in-process`,
 * for debugging). `--work-lease-ms` sets how long a worker may go without a
 * heartbeat before its stage is taken back (default 30 s, at least two
 * heartbeats). `atomic serve` takes `--workers` and `--work-lease-ms` too
 * (SERVICE_POOL_ARGS) and hands them to every drive it starts (`driveFlags`).
 */

import { loadConfig } from "../shared/config/load.ts";
import { availableParallelism } from "node:os";
import type { DriverOptions } from "../engine/driver.ts";
import { InProcessExecutor } from "../runners/stage-executor.ts";
import { DEFAULT_WORK_LEASE_MS, MIN_WORK_LEASE_MS, PoolExecutor } from "../pool/pool-executor.ts";
import { UsageError } from "../shared/errors.ts";
import { DEFAULT_QUEUE } from "../journal/fleet.ts";
import { FleetExecutor } from "../fleet/fleet-executor.ts";
import type { CliSession } from "./session.ts";

export const POOL_ARGS = {
  workers: { type: "string", description: "worker processes for a run's stages, started as stages wait (0: its stages go to worker hosts only; default min(4, CPUs))" },
  inProcess: { type: "boolean", description: "run stages inside this process instead of on workers (debugging)" },
  workLeaseMs: { type: "string", description: `how long a silent worker keeps its stage, in ms (default ${DEFAULT_WORK_LEASE_MS}, at least ${MIN_WORK_LEASE_MS})` },
} as const;

/** The pool flags `atomic serve` hands to every drive it starts (`atomic resume`'s, so one definition for both). */
export const SERVICE_POOL_ARGS = { workers: POOL_ARGS.workers, workLeaseMs: POOL_ARGS.workLeaseMs } as const;

/** `atomic resume` flags for the pool flags given to `atomic serve` (checked first with executorOption). */
export function driveFlags(args: { workers?: string | undefined; workLeaseMs?: string | undefined }): string[] {
  return [
    ...(args.workers !== undefined ? ["--workers", args.workers.trim()] : []),
    ...(args.workLeaseMs !== undefined ? ["--work-lease-ms", args.workLeaseMs.trim()] : []),
  ];
}

export function executorOption(
  s: CliSession,
  args: { workers?: string | undefined; inProcess?: boolean | undefined; workLeaseMs?: string | undefined },
): Required<Pick<DriverOptions, "executor">> {
  const workers = args.workers === undefined ? Math.min(4, availableParallelism()) : wholeNumber("--workers", args.workers, 0, 256);
  if (workers === 0 && !s.globals.journal) {
    throw new UsageError("bad_flag", "--workers 0 leaves stages to worker hosts, which need a shared Postgres journal", {
      hint: "add --journal postgres://… (and start atomic worker on the hosts), or give --workers 1 or more",
    });
  }
  const leaseMs =
    args.workLeaseMs === undefined ? DEFAULT_WORK_LEASE_MS : wholeNumber("--work-lease-ms", args.workLeaseMs, MIN_WORK_LEASE_MS, 86_400_000);
  if (args.inProcess) {
    if (args.workers !== undefined) {
      throw new UsageError("bad_flag", "--in-process and --workers cannot be used together", { hint: "choose one" });
    }
    return { executor: new InProcessExecutor() };
  }
  return {
    executor: (lease, journal) => {
      const pool = (queues?: string[]) =>
        new PoolExecutor({
          home: s.globals.home,
          rootId: lease.rootId,
          rootEpoch: lease.epoch,
          workers,
          leaseMs,
          ...workerStart(s.globals.home),
          ...(s.globals.journal ? { journalUrl: s.globals.journal } : {}),
          ...(queues ? { queues } : {}),
        });
      if (!journal.fleet) return pool();
      // A shared journal: worker hosts may run any stage; this root's own workers (if any) take the default queue.
      return new FleetExecutor({
        fleet: journal.fleet,
        work: journal.work,
        rootId: lease.rootId,
        leaseMs,
        ...(workers > 0 ? { local: pool([DEFAULT_QUEUE]) } : {}),
      });
    },
  };
}

function wholeNumber(flag: string, text: string, min: number, max: number): number {
  const n = Number(text);
  if (!/^\s*\d+\s*$/.test(text) || !Number.isInteger(n)) {
    throw new UsageError("bad_flag", `${flag} must be a whole number, got ${JSON.stringify(text)}`, { hint: `for example ${flag} ${min === 1 ? 4 : min}` });
  }
  if (n < min || n > max) {
    const why = flag === "--work-lease-ms" ? ` (two heartbeats of ${MIN_WORK_LEASE_MS / 2} ms)` : "";
    throw new UsageError("bad_flag", `${flag} must be between ${min}${why} and ${max}, got ${n}`, { hint: `for example ${flag} ${Math.max(min, flag === "--workers" ? 4 : min)}` });
  }
  return n;
}

/** The config's timeouts.workerStartMs, for a pool or a worker host (absent: their default). */
export function workerStart(home: string): { startupTimeoutMs?: number } {
  const ms = loadConfig({ home }).config.timeouts?.workerStartMs;
  return ms === undefined ? {} : { startupTimeoutMs: ms };
}
