/** What the pool's end-to-end tests share: reading a run's report and finding a run's processes. */

import { expect } from "bun:test";
import { readFileSync, readdirSync } from "node:fs";
import { runAtomic } from "../helpers/atomic.ts";

/** Alive and not a zombie. */
export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

export async function lastRun(home: string): Promise<Record<string, any>> {
  const r = await runAtomic(["runs", "--json", "--limit", "1"], { home });
  return JSON.parse(r.stdout.split("\n")[0]!);
}

export async function show(home: string, id: string): Promise<Record<string, any>> {
  const r = await runAtomic(["show", id, "--json"], { home });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout);
}

export function stage(report: Record<string, any>, name: string): Record<string, any> {
  return report.steps.find((s: Record<string, any>) => s.name === name);
}

/** Live processes whose environment names `home` as ATOMIC_HOME (a run's root, coordinator and workers all do). */
export function processesWithHome(home: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${name}/environ`, "utf8").split("\0").includes(`ATOMIC_HOME=${home}`) && alive(Number(name))) pids.push(Number(name));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids;
}
