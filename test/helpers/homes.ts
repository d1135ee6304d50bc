/**
 * For test files that run the binary in temp homes: after each test, the
 * processes it spawned are killed and its temp directories removed; after
 * the file, no process of any registered home may still run and no home may
 * remain on disk.
 *
 *   const track = trackHomes();
 *   const home = makeTempDir(); track(home);
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync } from "node:fs";
import { killSpawned, processesMatching } from "./atomic.ts";
import { removeTempDirs } from "./temp.ts";

export function trackHomes(): (home: string) => void {
  const homes: string[] = [];
  afterEach(async () => {
    await killSpawned();
    removeTempDirs();
  });
  afterAll(() => {
    for (const home of homes) {
      expect(processesMatching(home)).toEqual([]);
      expect(existsSync(home)).toBe(false);
    }
  });
  return (home) => {
    homes.push(home);
  };
}
