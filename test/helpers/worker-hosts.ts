/**
 * Worker hosts for tests, as plain processes on this machine (loopback):
 * `startWorkerHost({ journal, hostId })` spawns `atomic worker` with a home
 * of its own and resolves once it logged its "ready" line (its row is in
 * the host registry by then: the first heartbeat comes before it). The
 * process is spawnAtomic's, so killSpawned() (afterEach) ends whatever a
 * test left running; `gone()` waits until no process of the host's home is
 * left (its workers and their stages end with it).
 *
 * For hosts in network namespaces, cut off from Postgres, see fleet.ts.
 */

import type { Subprocess } from "bun";
import { lineWatcher, processesWithHome, spawnAtomic, waitUntil } from "./atomic.ts";
import { makeTempDir } from "./temp.ts";

export interface WorkerHostOptions {
  journal: string;
  /** Absent: no --host-id, the machine's own identity (hostname/machine id/boot id/pid namespace). */
  hostId?: string;
  slots?: number;
  queues?: string[];
  /** Extra `atomic worker` flags (--grace, --work-lease-ms …). */
  args?: string[];
  env?: Record<string, string>;
}

export interface WorkerHostProcess {
  hostId: string | undefined;
  home: string;
  proc: Subprocess<"pipe", "pipe", "pipe">;
  /** Its log (stderr), line by line. */
  log: ReturnType<typeof lineWatcher>;
  /** Sends `signal`; resolves with the exit code. */
  signal(signal: NodeJS.Signals): Promise<number>;
  /** Resolves once no process of its home is left. */
  gone(timeoutMs?: number): Promise<void>;
}

export async function startWorkerHost(opts: WorkerHostOptions): Promise<WorkerHostProcess> {
  const home = makeTempDir();
  const args = ["worker", "--journal", opts.journal, ...(opts.hostId !== undefined ? ["--host-id", opts.hostId] : []), "--slots", String(opts.slots ?? 1)];
  if (opts.queues) args.push("--queues", opts.queues.join(","));
  const proc = spawnAtomic([...args, ...(opts.args ?? [])], { home, cwd: home, ...(opts.env ? { env: opts.env } : {}) });
  const log = lineWatcher(proc.stderr);
  void proc.stdout.pipeTo(new WritableStream()).catch(() => {});
  let started = false;
  const ready = log.waitFor(/worker host ready: /, 60_000).then(() => void (started = true));
  // A host that exits first (bad flag, no database) fails the start with what it said.
  const exited = proc.exited.then((code) => {
    if (!started) throw new Error(`atomic worker --host-id ${opts.hostId ?? "(default)"} exited ${code} before it was ready:\n${log.text()}`);
  });
  ready.catch(() => {});
  exited.catch(() => {});
  await Promise.race([ready, exited]);
  return {
    hostId: opts.hostId,
    home,
    proc,
    log,
    signal(signal) {
      proc.kill(signal);
      return proc.exited;
    },
    async gone(timeoutMs = 30_000) {
      await proc.exited;
      await waitUntil(() => processesWithHome(home).length === 0, timeoutMs, `the processes of host ${opts.hostId ?? "(default)"} to end`);
    },
  };
}
