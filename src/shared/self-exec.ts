/**
 * Re-executing this binary in another role (pool coordinator, worker,
 * intercom broker). Compiled, `process.execPath` is atomic itself; from
 * source it is bun, and the entry file must follow — always src/main.ts,
 * found next to this file (not `Bun.main`: under `bun test` that is the
 * test file). Never child_process.fork() (docs/design/platform.md: the compiled child sees
 * its module path twice).
 *
 * The command line carries the role flag and non-secret ids only: every
 * user of the machine can read it (/proc/<pid>/cmdline). Configuration —
 * the home, the journal URL with its password — goes through the child's
 * environment (ATOMIC_POOL_CONFIG, which the child removes from its own
 * environment at once, so its children never inherit it).
 */

import { join } from "node:path";
import { takeEnv } from "./config/environment.ts";

export const ROLE = {
  coordinator: "--internal-pool-coordinator",
  worker: "--internal-workflow-worker",
  broker: "--internal-intercom-broker",
  sandboxNet: "--internal-sandbox-net",
  stageMcp: "--internal-stage-mcp",
  stageTool: "--internal-stage-tool",
  capturePage: "--internal-capture-page",
} as const;

/** Reads and removes this process's role configuration (undefined when there is none). */
export function takeRoleConfig(): string | undefined {
  return takeEnv("ATOMIC_POOL_CONFIG");
}

export function isCompiled(): boolean {
  return Bun.main.startsWith("/$bunfs/") || Bun.main.startsWith("B:/~BUN/");
}

export function selfCommand(role: string, ...args: string[]): string[] {
  return isCompiled() ? [process.execPath, role, ...args] : [process.execPath, join(import.meta.dir, "..", "main.ts"), role, ...args];
}
