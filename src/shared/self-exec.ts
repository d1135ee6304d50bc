/**
 * Re-executing this binary in another role (pool coordinator, worker,
 * intercom broker). Compiled, `process.execPath` is atomic itself; from
 * source it is bun, and the entry file must follow — always src/main.ts,
 * found next to this file (not `Bun.main`: under `bun test` that is the
 * test file). Never child_process.fork() (STACK.md: the compiled child sees
 * its module path twice).
 */

import { join } from "node:path";

export const ROLE = {
  coordinator: "--internal-pool-coordinator",
  worker: "--internal-workflow-worker",
  broker: "--internal-intercom-broker",
} as const;

export function isCompiled(): boolean {
  return Bun.main.startsWith("/$bunfs/") || Bun.main.startsWith("B:/~BUN/");
}

export function selfCommand(role: string, ...args: string[]): string[] {
  return isCompiled() ? [process.execPath, role, ...args] : [process.execPath, join(import.meta.dir, "..", "main.ts"), role, ...args];
}
