/**
 * dist/atomic for tests and benchmarks: built with scripts/build.ts when it
 * is missing or older than any file under src/ (ATOMIC_BIN names another
 * binary and skips the check). Built at most once per process.
 */

import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

export const ROOT = join(import.meta.dir, "..");
let binary: string | undefined;

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestSource(path) : statSync(path).mtimeMs);
  }
  return newest;
}

export function atomicBin(onBuild?: () => void): string {
  if (binary) return binary;
  const bin = process.env.ATOMIC_BIN ?? join(ROOT, "dist", "atomic");
  if (!process.env.ATOMIC_BIN && (!existsSync(bin) || statSync(bin).mtimeMs < newestSource(join(ROOT, "src")))) {
    onBuild?.();
    const r = Bun.spawnSync([process.execPath, join(ROOT, "scripts", "build.ts"), bin], { stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`build failed: ${r.stderr.toString()}`);
  }
  binary = bin;
  return bin;
}
