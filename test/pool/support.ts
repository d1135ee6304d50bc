/** What the pool's end-to-end tests share: reading a run's report and finding a run's processes. */

import { expect } from "bun:test";
import { readFileSync } from "node:fs";
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

export { processesWithHome } from "../helpers/atomic.ts";
