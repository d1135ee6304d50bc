/**
 * Re-executing this binary in another role. Compiled, `process.execPath`
 * is atomic itself; from source it is bun, and the entry file must follow
 * (`Bun.main`). Never child_process.fork() (STACK.md: the compiled child
 * sees its module path twice).
 */

export function selfCommand(role: string, ...args: string[]): string[] {
  const compiled = Bun.main.startsWith("/$bunfs/") || Bun.main.startsWith("B:/~BUN/");
  return compiled ? [process.execPath, role, ...args] : [process.execPath, Bun.main, role, ...args];
}

export const ROLE = {
  coordinator: "--internal-pool-coordinator",
  worker: "--internal-workflow-worker",
} as const;
