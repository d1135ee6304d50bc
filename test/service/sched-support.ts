/**
 * For the service's tests through the binary: runs the service starts are
 * detached drivers (service/spawn-run.ts), not children of the test, so
 * `cleanHome` ends every process that carries the home, and the
 * `atomic serve` helper waits for its login line.
 */

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { expect } from "bun:test";
import { killProcessesWithHome, lineWatcher, processesWithHome, spawnAtomic, waitUntil, type AtomicOptions } from "../helpers/atomic.ts";

export const COUNT = join(import.meta.dir, "fixtures", "count.ts");

/** The lines the count fixture wrote to `log` (one per side effect). */
export function effects(log: string): string[] {
  return existsSync(log) ? readFileSync(log, "utf8").split("\n").filter(Boolean) : [];
}

/** SIGKILLs every process of `home` still running (drivers the service started) and waits until none is left. */
export async function cleanHome(home: string): Promise<void> {
  killProcessesWithHome(home);
  await waitUntil(() => processesWithHome(home).length === 0, 10_000, `the processes of ${home} to end`);
}

/** `atomic serve --port 0 …` with its address and token once it printed them. */
export async function startServe(opts: AtomicOptions, args: string[] = []) {
  const proc = spawnAtomic(["serve", "--port", "0", ...args], opts);
  const out = lineWatcher(proc.stdout);
  const line = await out.waitFor(/^status page: /);
  const m = /^status page: (http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(line.trim());
  expect(m).not.toBeNull();
  return { proc, out, url: m![1]!, token: m![2]! };
}

/** GET /api/service of a service startServe started: its state (active or standby) and each duty's counts. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON of the API
export async function serviceState(serve: { url: string; token: string }): Promise<any> {
  const res = await fetch(new URL("/api/service", serve.url), { headers: { Authorization: `Bearer ${serve.token}` } });
  expect(res.status).toBe(200);
  return res.json();
}

/** Waits until `count` (a counter of /api/service) grew by `by`. */
export async function counterGrows(serve: { url: string; token: string }, count: (state: any) => number, by: number, what: string): Promise<void> {
  const from = count(await serviceState(serve));
  await waitUntil(async () => count(await serviceState(serve)) >= from + by, 30_000, what);
}
