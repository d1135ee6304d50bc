/**
 * Watching a `dist/atomic` process and everything it starts, from /proc:
 * which processes there are (root, coordinator, worker, broker, stage
 * commands), their CPU time and their resident memory over time.
 *
 * A sample every `everyMs` reads /proc/<pid>/stat and /status of the root
 * and its descendants (a process's CPU time is its utime + stime in clock
 * ticks, 10 ms each, as last seen: the last moments of a process that ends
 * between two samples are lost, which is why the benchmarks take the total
 * CPU from the rusage the root's wait returns and this split by role for
 * information). The sampling itself costs the machine CPU: keep `everyMs`
 * at 100 ms or more for figures about CPU.
 */

import { readdirSync, readFileSync } from "node:fs";

export type Role = "root" | "coordinator" | "worker" | "broker" | "other";

const TICK_MS = 10;

/** The pids of every descendant of `pid`, from /proc (parents read from each process's stat). */
export function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(name));
      children.set(ppid, list);
    } catch {
      // gone
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}

export function roleOf(pid: number, rootPid: number): Role {
  if (pid === rootPid) return "root";
  let cmdline: string;
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
  } catch {
    return "other";
  }
  if (cmdline.includes("--internal-workflow-worker")) return "worker";
  if (cmdline.includes("--internal-pool-coordinator")) return "coordinator";
  if (cmdline.includes("--internal-intercom-broker")) return "broker";
  return "other";
}

/**
 * CPU ms (utime + stime), resident MB (VmRSS) and its private, anonymous
 * part (RssAnon: the heaps) of one process now; undefined once it is gone.
 * The rest of VmRSS is mostly pages of the 120 MB binary itself, shared by
 * every process of a run and faulted in as more of its code runs: a figure
 * of what a process keeps should use `anonMb`.
 */
export function processNow(pid: number): { cpuMs: number; rssMb: number; anonMb: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // Fields after the command: state is [0], utime [11], stime [12] (stat(5) numbers them 14 and 15).
    const cpuMs = (Number(fields[11]) + Number(fields[12])) * TICK_MS;
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0) / 1024;
    return { cpuMs, rssMb: kb("VmRSS"), anonMb: kb("RssAnon") };
  } catch {
    return undefined;
  }
}

export interface TreeSample {
  /** ms since the watch began. */
  at: number;
  /** Resident MB per role, summed over its processes. */
  rssMb: Record<Role, number>;
  /** The largest single process's resident MB per role. */
  maxRssMb: Record<Role, number>;
  /** Private, anonymous resident MB (RssAnon) per role, summed, and of the largest single process. */
  anonMb: Record<Role, number>;
  maxAnonMb: Record<Role, number>;
}

export interface TreeWatch {
  samples: TreeSample[];
  /** CPU ms per role, each process as last seen. */
  cpuByRole(): Record<Role, number>;
  stop(): void;
}

const zero = (): Record<Role, number> => ({ root: 0, coordinator: 0, worker: 0, broker: 0, other: 0 });

/** Samples the tree under `rootPid` every `everyMs` until stop(). */
export function watchTree(rootPid: number, everyMs = 200): TreeWatch {
  const t0 = performance.now();
  const seen = new Map<number, { role: Role; cpuMs: number }>();
  const samples: TreeSample[] = [];
  const sample = () => {
    const rssMb = zero();
    const maxRssMb = zero();
    const anonMb = zero();
    const maxAnonMb = zero();
    for (const pid of [rootPid, ...descendants(rootPid)]) {
      const now = processNow(pid);
      if (!now) continue;
      const known = seen.get(pid);
      const role = known?.role ?? roleOf(pid, rootPid);
      seen.set(pid, { role, cpuMs: now.cpuMs });
      rssMb[role] += now.rssMb;
      maxRssMb[role] = Math.max(maxRssMb[role], now.rssMb);
      anonMb[role] += now.anonMb;
      maxAnonMb[role] = Math.max(maxAnonMb[role], now.anonMb);
    }
    samples.push({ at: performance.now() - t0, rssMb, maxRssMb, anonMb, maxAnonMb });
  };
  sample();
  const timer = setInterval(sample, everyMs);
  return {
    samples,
    cpuByRole() {
      const out = zero();
      for (const { role, cpuMs } of seen.values()) out[role] += cpuMs;
      return out;
    },
    stop() {
      clearInterval(timer);
    },
  };
}
