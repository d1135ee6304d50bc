/**
 * Shared pieces of the intercom tests: a temp ATOMIC_HOME per test, and an
 * `afterEach` that stops every broker (and any other process) started for
 * those homes and removes them, so no broker, socket or directory outlives
 * a test. Brokers are found by their role flag and the ATOMIC_HOME in
 * their environment (the home is not on their command line).
 */

import { existsSync, readFileSync } from "node:fs";
import type { Socket } from "bun";
import { FrameDecoder, encodeFrame, type Decoded } from "../../src/intercom/framing.ts";
import { intercomPaths } from "../../src/intercom/paths.ts";
import { processesMatching, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const homes = new Set<string>();

export function newHome(prefix = "atomic-ic-"): string {
  const home = makeTempDir(prefix);
  homes.add(home);
  return home;
}

export function brokerPidOf(home: string): number | undefined {
  try {
    return (JSON.parse(readFileSync(intercomPaths(home).pidFile, "utf8")) as { pid: number }).pid;
  } catch {
    return undefined;
  }
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return false;
  }
}

/** Broker processes of a home (by command line). */
export function brokersOf(home: string): number[] {
  return processesMatching(`ATOMIC_HOME=${home}\0`, "--internal-intercom-broker").filter(alive);
}

/** Every process whose command line names one of our homes: SIGTERM, then SIGKILL; then the homes go. */
export async function cleanupHomes(): Promise<void> {
  for (const home of homes) {
    const pids = processesMatching(home).filter(alive);
    for (const pid of pids) signal(pid, "SIGTERM");
    try {
      await waitUntil(() => pids.every((p) => !alive(p)), 3_000, "brokers to stop");
    } catch {
      for (const pid of pids) signal(pid, "SIGKILL");
      await waitUntil(() => pids.every((p) => !alive(p)), 5_000, "brokers to die");
    }
  }
  homes.clear();
  removeTempDirs();
}

export function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // gone
  }
}

/** A raw connection to a broker socket: write any bytes, collect decoded frames, see it close. */
export interface RawConn {
  write(bytes: Uint8Array): void;
  frame(value: unknown): void;
  frames: Decoded[];
  closed: Promise<void>;
  isClosed(): boolean;
  end(): void;
}

export async function rawConnect(socketPath: string): Promise<RawConn> {
  const decoder = new FrameDecoder();
  const frames: Decoded[] = [];
  let closed = false;
  let onClose!: () => void;
  const closedP = new Promise<void>((r) => (onClose = r));
  const socket: Socket<undefined> = await Bun.connect<undefined>({
    unix: socketPath,
    socket: {
      data(_s, chunk) {
        frames.push(...decoder.push(chunk));
      },
      close() {
        closed = true;
        onClose();
      },
      error() {
        closed = true;
        onClose();
      },
    },
  });
  return {
    write(bytes) {
      if (!closed) socket.write(bytes);
    },
    frame(value) {
      if (!closed) socket.write(encodeFrame(value));
    },
    frames,
    closed: closedP,
    isClosed: () => closed,
    end() {
      socket.end();
    },
  };
}

export function socketExists(home: string): boolean {
  return existsSync(intercomPaths(home).socket);
}
