/**
 * Named fault points: places in production code where a test can make the
 * process die (or throw) at an exact moment, such as between a step's end
 * and its checkpoint. Inert unless armed through the environment:
 *
 *   ATOMIC_FAULT_POINTS="before-checkpoint:5,after-checkpoint:12"
 *
 * arms `before-checkpoint` to fire on its 5th hit and `after-checkpoint` on
 * its 12th; `name:*` fires on every hit (a fault that persists, with
 * `throw`). `ATOMIC_FAULT_ACTION` is `kill` (default: SIGKILL this process,
 * like a power cut), `throw`, `hang` (the process blocks for good, like
 * one stuck in a system call, until something kills it), or `stop` (the
 * process SIGSTOPs itself, so a test can act at that exact moment, such as
 * crash the database, and let it go on with SIGCONT; `[fault] NAME #N:
 * SIGSTOP` on stderr says when). Counting is per process.
 */

import { writeStderr } from "./raw-stderr.ts";
import { readEnv } from "./config/environment.ts";
import { sleepSync } from "./sleep-sync.ts";

const EVERY_HIT = 0;
const armed = parse(readEnv("ATOMIC_FAULT_POINTS"));
const hits = new Map<string, number>();

function parse(spec: string | undefined): Map<string, number> | undefined {
  if (!spec) return undefined;
  const map = new Map<string, number>();
  for (const part of spec.split(",")) {
    const [name, n] = part.split(":");
    if (name) map.set(name.trim(), n?.trim() === "*" ? EVERY_HIT : Number(n ?? 1) || 1);
  }
  return map;
}

export function faultPoint(name: string): void {
  if (!armed) return;
  const target = armed.get(name);
  if (target === undefined) return;
  const count = (hits.get(name) ?? 0) + 1;
  hits.set(name, count);
  if (count !== target && target !== EVERY_HIT) return;
  const action = readEnv("ATOMIC_FAULT_ACTION");
  if (action === "throw") throw new Error(`fault point ${name} fired`);
  if (action === "hang") {
    writeStderr(`[fault] ${name} #${count}: hanging\n`);
    for (;;) sleepSync(60_000);
  }
  if (action === "stop") {
    writeStderr(`[fault] ${name} #${count}: SIGSTOP\n`);
    process.kill(process.pid, "SIGSTOP");
    return;
  }
  writeStderr(`[fault] ${name} #${count}: SIGKILL\n`);
  process.kill(process.pid, "SIGKILL");
}
